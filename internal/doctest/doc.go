// Package doctest holds the test that builds every Go snippet of README.md
// and docs/: a user copies them, so each must compile against the code of
// the same commit. It has no code of its own.
package doctest

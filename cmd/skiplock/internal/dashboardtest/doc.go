// Package dashboardtest drives the dashboard (package queue/dashboard) in a
// real headless Chromium: its tests live in the command's module so that
// chromedp never becomes a requirement of the library. It has no code
// besides its tests.
package dashboardtest

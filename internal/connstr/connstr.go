// Package connstr keeps the passwords of connection strings out of what
// people read: error messages, log lines, the command's output. pgx masks
// the password of a string it fails to parse, on a best-effort basis; this
// package does not depend on where a password ended up: Redact removes
// every password a connection string holds from any text, wherever it
// appears in it, as written or percent-encoded.
package connstr

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask replaces a password.
const Mask = "xxxxx"

// Redact returns text without the passwords of conns (postgres:// URLs or
// key=value settings, valid or not): each is replaced by Mask.
func Redact(text string, conns ...string) string {
	var secrets []string
	for _, c := range conns {
		secrets = append(secrets, Passwords(c)...)
	}
	return Scrub(text, secrets...)
}

// Passwords returns the passwords conn holds: the URL's user password and
// its password and sslpassword parameters, or the key=value settings of
// those names, and PGPASSWORD when conn takes its password from there. A
// conn that does not parse is searched as text, generously: it may yield
// more than the password, never less.
func Passwords(conn string) []string {
	if conn == "" {
		return nil
	}
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if cfg, err := pgconn.ParseConfig(conn); err == nil {
		add(cfg.Password)
	}
	rest, isURL := cutScheme(conn)
	if isURL {
		// The user information runs to the last @ of the authority; a
		// malformed URL may have a / or ? in its password, so the last @
		// before the parameters is taken, and failing that the last @.
		end := len(rest)
		if i := strings.IndexAny(rest, "?#"); i >= 0 && strings.Contains(rest[:i], "@") {
			end = i
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
		for _, m := range urlParam.FindAllStringSubmatch(conn, -1) {
			add(m[1])
		}
	} else {
		for _, m := range keyValue.FindAllStringSubmatch(conn, -1) {
			v := m[1]
			add(v)
			if strings.HasPrefix(v, "'") {
				v = strings.TrimSuffix(v[1:], "'")
				add(v)
				v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v)
			}
			add(v)
		}
	}
	for _, s := range slices.Clone(out) {
		if d, err := url.PathUnescape(s); err == nil {
			add(d)
		}
		if d, err := url.QueryUnescape(s); err == nil {
			add(d)
		}
	}
	return out
}

var (
	urlParam = regexp.MustCompile(`[?&](?:ssl)?password=([^&#]*)`)
	keyValue = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)
)

func cutScheme(conn string) (string, bool) {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if len(conn) >= len(scheme) && strings.EqualFold(conn[:len(scheme)], scheme) {
			return conn[len(scheme):], true
		}
	}
	return conn, false
}

// Scrub replaces each of secrets in text with Mask, as written and in the
// percent-encoded forms a URL gives it.
func Scrub(text string, secrets ...string) string {
	var forms []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		forms = append(forms, s, url.QueryEscape(s), url.PathEscape(s), url.UserPassword("", s).String()[1:])
	}
	// Longest first, so that a form is not cut by a shorter one inside it.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		text = strings.ReplaceAll(text, f, Mask)
	}
	return text
}

// Error returns err with secrets scrubbed from its message (nil for nil).
// errors.Is and errors.As see err's chain unchanged.
func Error(err error, secrets ...string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	if clean := Scrub(msg, secrets...); clean != msg {
		return &scrubbed{msg: clean, err: err}
	}
	return err
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// Logger returns a logger that writes to l's handler with secrets scrubbed
// from every record: its message and its attributes' values (errors and
// other values as they print). l itself when there are no secrets.
func Logger(l *slog.Logger, secrets ...string) *slog.Logger {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s string) bool { return s == "" })
	if len(secrets) == 0 {
		return l
	}
	return slog.New(&handler{next: l.Handler(), secrets: secrets})
}

type handler struct {
	next    slog.Handler
	secrets []string
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Scrub(r.Message, h.secrets...), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(clean), secrets: h.secrets}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), secrets: h.secrets}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Scrub(v.String(), h.secrets...))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, Error(err, h.secrets...))
		}
		s := v.String()
		if clean := Scrub(s, h.secrets...); clean != s {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

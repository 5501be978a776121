package compare

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultAdminDSN is the server used when neither -admin-dsn,
// PEER_ADMIN_DSN nor DATABASE_URL names one.
const DefaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminDSN picks the connection string the compare creates and drops its
// databases with: flag (-admin-dsn), else $PEER_ADMIN_DSN, else the server
// of $DATABASE_URL (its database "postgres"), else DefaultAdminDSN.
func AdminDSN(flag string) (dsn, source string, err error) {
	switch {
	case flag != "":
		return flag, "-admin-dsn", nil
	case os.Getenv("PEER_ADMIN_DSN") != "":
		return os.Getenv("PEER_ADMIN_DSN"), "PEER_ADMIN_DSN", nil
	case os.Getenv("DATABASE_URL") != "":
		u, err := serverURL(os.Getenv("DATABASE_URL"))
		if err != nil {
			return "", "", fmt.Errorf("DATABASE_URL: %w", err)
		}
		return withDatabase(u, "postgres").String(), "DATABASE_URL's server", nil
	}
	return DefaultAdminDSN, "default", nil
}

// serverURL turns a connection string, URL or key=value, into a URL. A
// key=value string is rebuilt from what pgx parses of it (host, port, user,
// password, database, TLS off or on): Node's driver, for one, reads URLs
// only.
func serverURL(dsn string) (*url.URL, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return url.Parse(dsn)
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: "postgres", Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		u.Host = ":" + strconv.Itoa(int(cfg.Port))
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u, nil
}

// withDatabase is u naming database db instead.
func withDatabase(u *url.URL, db string) *url.URL {
	c := *u
	c.Path = "/" + db
	c.RawPath = ""
	return &c
}

// throughRelay is u reaching its server through the relay at addr
// (host:port): its host and port replaced, a socket directory dropped.
func throughRelay(u *url.URL, addr string) *url.URL {
	c := *u
	c.Host = addr
	q := c.Query()
	q.Del("host")
	q.Del("port")
	c.RawQuery = q.Encode()
	return &c
}

// upstream is the address a relay forwards to for the server of dsn:
// ("tcp", host:port), or ("unix", its socket) when the host is a socket
// directory.
func upstream(dsn string) (network, addr string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", err
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port))), nil
	}
	return "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

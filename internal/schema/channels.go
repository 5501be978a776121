package schema

// Channels returns the NOTIFY channels of the schema skiplock_tasks lives
// in: work carries queue names (new work, resumed queues), control carries
// commands to workers (internal/control). Identifiers are cut at 63 bytes, as
// PostgreSQL cuts them.
func Channels(schema string) (work, control string) {
	return cut63("skiplock_" + schema), cut63("skiplock_ctl_" + schema)
}

func cut63(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

package ops

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/clientaccess"
	"github.com/skiplock/skiplock/queue"
)

// Count returns how many tasks match f (its Limit and BeforeID aside): how
// many a change of the command would touch, how many a page of the
// dashboard leaves out. Its errors are List's for the same filter.
func Count(ctx context.Context, c *queue.Client, f queue.Filter) (int64, error) {
	return clientaccess.Count(ctx, c, f)
}

// recentNamesScan is how many of the newest tasks TaskNames reads.
const recentNamesScan = 10000

// TaskNames lists the distinct task names among the newest
// recentNamesScan tasks, sorted: the names a filter is likely to want,
// at a cost that does not grow with the table.
func TaskNames(ctx context.Context, c *queue.Client) ([]string, error) {
	names, err := queries.TaskNamesRecent(ctx, exec(c), recentNamesScan)
	if err != nil {
		return nil, fmt.Errorf("listing task names: %w", err)
	}
	return names, nil
}

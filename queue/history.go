package queue

// History returns every attempt of the task, oldest first: the entries of
// Errors, then, while the task runs or once it has completed, the attempt
// the task itself describes (Outcome "running" or "completed"; FinishedAt
// zero while it runs). The dashboard and the skiplock command show it.
func (t *Task) History() []AttemptError {
	out := make([]AttemptError, len(t.Errors), len(t.Errors)+1)
	copy(out, t.Errors)
	if t.Status != StatusRunning && t.Status != StatusCompleted {
		return out
	}
	cur := AttemptError{Attempt: t.Attempt, Outcome: string(t.Status), WorkerID: t.WorkerID}
	if t.StartedAt != nil {
		cur.StartedAt = *t.StartedAt
	}
	if t.Status == StatusCompleted && t.FinishedAt != nil {
		cur.FinishedAt = *t.FinishedAt
	}
	return append(out, cur)
}

// LastError returns the error of the task's last failed attempt, or "" for
// none. Entries that record a requeue are notes, not errors, and are
// passed over.
func (t *Task) LastError() string {
	for i := len(t.Errors) - 1; i >= 0; i-- {
		if t.Errors[i].Outcome != "requeued" {
			return t.Errors[i].Error
		}
	}
	return ""
}

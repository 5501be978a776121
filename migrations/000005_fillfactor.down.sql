ALTER TABLE skiplock_tasks RESET (fillfactor);

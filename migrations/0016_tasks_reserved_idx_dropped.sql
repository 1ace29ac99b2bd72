-- tasks_client_reserved_idx (0010) is partial (WHERE points_reserved <> 0), and no statement of the
-- SQLite store implies that condition, so no query plan used it (docs/performance.md, the task side's
-- eleventh round); every reservation and every release wrote an entry of it (issue #43).
DROP INDEX `tasks_client_reserved_idx`;

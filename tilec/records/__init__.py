"""Tuning records: the measured schedules the tuner writes and compilation applies.

`record` (one measured candidate and its task's key), `db` (the SQLite store: append-only,
shared by concurrent tuners, JSON lines in and out), `lookup` (the best records of a program as
the TemplateSchedule `tilec.compile` applies, and `using`, which records apply within a block).
"""

from tilec.records.db import BUSY_TIMEOUT_MS, SCHEMA_VERSION, RecordDB, default_path
from tilec.records.lookup import recorded_schedule, using
from tilec.records.record import TASK_ERRORS, Record, task_key

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "TASK_ERRORS", "Record", "RecordDB", "default_path", "recorded_schedule",
           "task_key", "using"]

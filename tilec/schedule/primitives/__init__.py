"""A user's Schedule: primitive records (`records`) and their rules, applied to the plain default
loop nest by `apply`; each rule refuses an illegal use with a ScheduleError that says why."""

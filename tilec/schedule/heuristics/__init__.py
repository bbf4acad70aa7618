"""The untuned template choice per statement: one heuristic per target kind (`cpu`, `gpu`)."""

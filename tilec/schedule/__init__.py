"""Scheduling: from bound tensor IR to loop IR.

`lowering` runs the two stages: the template choice per statement (`heuristics/`, one per target
kind, looking templates up in `registry`; a `template_schedule.TemplateSchedule` fixes some
choices) and the loop IR each chosen template builds. `templates/` is the protocol every template
follows, `cpu/` and `gpu/` the templates, `patterns/` the target-neutral matchers they share,
`primitives/` a user's Schedule (split, reorder, bind, ...) applied to the plain default nest,
`params` the lowering thresholds, `nest` loop-building blocks.
"""

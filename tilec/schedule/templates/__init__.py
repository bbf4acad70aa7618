"""The template protocol (`base`), knob records (`knobs`), search spaces (`space`) and the
`default` template (the plain nest). Templates themselves live in tilec.schedule.cpu and
tilec.schedule.gpu, and are found through tilec.schedule.registry."""

"""The tuner: tasks (`task`), their spaces (`space`: the templates'), features (`features`), the
cost model (`model`), search (`search`), building and measuring candidates away from the tuner
(`build`, `measure`, `gpu`), and the loop that ties them to the tuning records (`tuner`)."""

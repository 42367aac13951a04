"""From a recording to parameters: filtering, base parameters, estimators, physical consistency,
and ``identify`` that runs them. Builds on ``dynamics``."""

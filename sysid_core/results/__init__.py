"""What a run hands back: params.json and updated models, the text report and PNG figures.
Builds on everything below it (``damiao`` for motor limits in the exported trajectory)."""

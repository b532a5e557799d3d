"""The run folder and what is written into it: receipt.json and its schema, the private-file writers every phase uses,
the verdicts."""

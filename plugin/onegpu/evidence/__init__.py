"""The run folder and what is written into it: receipt.json, the verdicts, the one reader of run folders."""

"""What a person reads: report.html, the public summary, and the comparison of two run folders; the one reader of run
folders they, and calibration, share."""

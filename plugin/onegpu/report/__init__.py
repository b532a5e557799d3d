"""What a person reads: report.html, the public summary, and the comparison of two run folders."""

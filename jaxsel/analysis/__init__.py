"""What is computed over finished runs or over many runs: comparisons, reports, plots,
time to accuracy, benchmarks and searches. May use everything but the command line.
"""

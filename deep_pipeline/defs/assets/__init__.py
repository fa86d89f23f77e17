"""Asset definitions, one module per group: inputs, matrix, iteration, output."""

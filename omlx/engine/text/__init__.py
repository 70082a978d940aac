"""Prompt and output text of the request path: templating, validation, detokenizing,
stop strings, thinking budgets and the reasoning/tool-call output parsers (no MLX)."""

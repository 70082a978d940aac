"""GitHub Copilot CLI: its bring-your-own-provider environment variables, no file."""

from __future__ import annotations

from omlx.integrations.tool import Plan, Target, Tool


class CopilotCli(Tool):
    name = "copilot"
    display_name = "GitHub Copilot CLI"
    binary = "copilot"
    docs_url = (
        "https://docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/use-byok-models"
    )
    api = "/v1/chat/completions"

    def plan(self, target: Target, args: list[str]) -> Plan:
        model = target.model
        env = {
            "COPILOT_PROVIDER_BASE_URL": target.server.openai_base,
            "COPILOT_PROVIDER_TYPE": "openai",
            "COPILOT_PROVIDER_WIRE_API": "completions",
            "COPILOT_PROVIDER_API_KEY": target.key,
            "COPILOT_MODEL": model.id,
            "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": str(
                model.context_tokens - model.max_output_tokens
            ),
            "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS": str(model.max_output_tokens),
            # Talk to omlx only: no GitHub sign-in, telemetry or update checks.
            "COPILOT_OFFLINE": "true",
        }
        return Plan(changes=[], argv=[self.binary, *args], env=env)

"""A stand-in for the reference's `micro_agent` package, so a TOOLS_MODULES module written for
micro-agent (`from micro_agent.tools import Tool`) imports beside Rondo's micro-agent."""

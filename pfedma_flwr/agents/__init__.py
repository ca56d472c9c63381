"""Client agents: LLM backends, prompt construction and parsing of structured answers."""

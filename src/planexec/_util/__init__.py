"""Small helpers every planexec package stands on: text clipping and counting, strict JSON for
untrusted values, bounded JSON Schema validation, safe regular expressions, task endings, running
coroutines from synchronous code, and install hints for optional extras.

They serve planexec's own packages and are not part of its public API."""

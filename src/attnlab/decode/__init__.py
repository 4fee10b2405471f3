"""Decoding: greedy, beam search and sampling on the KV cache (:mod:`.search`), the session the
searches share (:mod:`.session`), the lean fast step tested equal to the reference
(:mod:`.fast`), and what guides a search: prefixes and lexical constraints (:mod:`.constraints`)."""

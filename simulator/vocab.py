"""The simulated model's word classes.

They serve twice: as whole-word tokens of the tokenizer (so ordinary English prompts cost about a
token per word, as with a real BPE vocabulary), and as the words the pseudo-prose generator writes.
The themes are the product's own (serving, caching, scheduling) so generated answers read as
plausible if bland technical prose.
"""

DETERMINERS = ["the", "a", "each", "every", "this", "that", "one", "another", "some", "no", "any", "our", "its"]

ADJECTIVES = [
    "shared", "warm", "cold", "small", "large", "quiet", "busy", "steady", "early", "late", "simple",
    "careful", "quick", "slow", "stable", "useful", "common", "recent", "older", "newer", "single",
    "partial", "complete", "fresh", "stale", "bounded", "patient", "modest", "clear", "brief", "long",
    "short", "local", "remote", "hidden", "visible", "gentle", "plain", "honest", "ready", "idle",
    "spare", "narrow", "wide", "deep", "light", "heavy", "fair", "prior", "next",
]

NOUNS = [
    "cache", "prefix", "request", "token", "batch", "queue", "server", "worker", "model", "prompt",
    "answer", "question", "reply", "stream", "node", "tree", "branch", "leaf", "path", "step",
    "system", "user", "page", "memory", "budget", "limit", "window", "context", "message", "turn",
    "thread", "signal", "pattern", "result", "choice", "reason", "moment", "detail", "record", "story",
    "river", "garden", "library", "bridge", "harbor", "engine", "map", "plan", "habit", "season",
    "morning", "evening", "village", "market", "journey", "lesson", "picture", "letter", "voice", "idea",
    "rule", "table", "number", "schedule", "gateway", "route", "slot", "share", "copy", "draft",
]

VERBS = [
    "keeps", "holds", "sends", "reads", "writes", "finds", "builds", "shares", "moves", "waits",
    "returns", "joins", "leaves", "follows", "carries", "serves", "counts", "checks", "brings", "opens",
    "closes", "starts", "ends", "guides", "reaches", "marks", "trims", "fills", "frees", "grows",
    "saves", "shows", "meets", "takes", "gives", "answers", "explains", "suggests", "covers", "measures",
]

ADVERBS = [
    "quietly", "quickly", "slowly", "carefully", "often", "rarely", "always", "sometimes", "gently",
    "clearly", "simply", "early", "later", "again", "together", "first", "soon", "still", "mostly",
    "nearly",
]

PREPOSITIONS = ["in", "on", "with", "for", "from", "into", "through", "across", "under", "over", "near",
                "after", "before", "beside", "toward", "between", "along", "within"]

CONNECTIVES = ["and", "but", "so", "while", "because", "although", "until", "once", "as", "when"]

PRONOUNS = ["it", "we", "they", "you", "everyone", "nobody", "someone"]

OTHER = [
    "is", "are", "was", "be", "can", "will", "should", "may", "not", "of", "to", "what", "how", "why",
    "who", "which", "where", "there", "here", "then", "than", "if", "or", "yes", "hello", "hi", "please",
    "thanks", "thank", "write", "tell", "me", "my", "your", "about", "do", "does", "i", "am", "have",
    "has", "more", "less", "all", "most", "very", "just", "only", "also", "like", "make", "know", "help",
    "good", "new", "time", "day", "way", "word", "words", "title", "summary", "conversation", "below",
    "above", "at", "by", "as", "up", "out", "no",
]

PUNCTUATION = [".", ",", "!", "?", ";", ":", "'", '"', "-", "(", ")", "\n", "\n\n"]


def all_words() -> list[str]:
    """Every word, once, in a fixed order (token ids depend on this order: append, never reorder)."""
    seen: dict[str, None] = {}
    for group in (DETERMINERS, ADJECTIVES, NOUNS, VERBS, ADVERBS, PREPOSITIONS, CONNECTIVES, PRONOUNS, OTHER):
        for word in group:
            seen.setdefault(word, None)
    return list(seen)

"""Text rules of the built-in engine: sentences, filler, questions, and first person resolved.

Pure functions over strings, each unit-tested (tests/unit/test_extraction_rules.py).
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+|\s+-\s+|\s*—\s*|(?<=\w)--+(?=\w)|\s+--+\s+|;\s+")
_ABBREVIATIONS = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|e\.g|i\.e)\.$", re.IGNORECASE)
WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")

STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself
him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
mustn't my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't
she she'd she'll she's should shouldn't so some such than that that's the their theirs them themselves then
there there's these they they'd they'll they're they've this those through to too under until up very was
wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while who who's
whom why why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
just really so also even still now yeah yes oh wow okay ok lot lots thing things stuff get got gonna gotta
""".split())

#: Whole sentences that carry no fact: greetings, thanks, agreement, reactions, sign-offs.
_FILLER = re.compile(
    r"^(?:(?:hi|hey|hello|heya|yo|thanks|thank you|thx|ty|bye|goodbye|good night|good morning|cheers|take care|"
    r"see you|see ya|talk soon|talk later|catch you later|congrats|congratulations|well done|good luck|"
    r"wow|whoa|oh|ah|aw+|oops|haha|hah|lol|omg|yay|cool|nice|great|awesome|amazing|wonderful|fantastic|"
    r"sweet|perfect|exactly|definitely|absolutely|totally|true|right|sure|of course|yes|yeah|yep|yup|no|nope|"
    r"ok|okay|alright|hmm|um|uh|same here|me too|you too|no worries|no problem|my pleasure|you're welcome|"
    r"sounds (?:good|great|fun|awesome|amazing|like a plan)|that's (?:great|awesome|amazing|cool|nice|"
    r"wonderful|fantastic|so cool|so nice|true|right|it)|good to (?:hear|see you|know)|glad to hear(?: that)?|"
    r"love (?:it|that)|i agree|agreed|same)"
    r"[\s,!.~:)(-]*)+(?:\w+[!.]*)?$",
    re.IGNORECASE,
)

#: Leading interjections stripped before a sentence is judged ("Yeah, good flooring's crucial").
_LEADING = re.compile(
    r"^(?:(?:hi|hey|hello|yeah|yes|yep|no|nope|oh|ah|aw+|wow|whoa|well|so|hmm|um|uh|haha|lol|omg|ok|okay|"
    r"alright|thanks|thank you|congrats|sure|totally|definitely|absolutely|honestly|actually|anyway|btw|"
    r"by the way|cool|nice|great|awesome|oh man|man|dude|anyways|also|besides|guess what|you know what|fun fact|"
    r"funny enough|to be honest|tbh|speaking of (?:which|that)|in the meantime(?: though)?|"
    r"on an? (?:different|side|related|lighter|brighter|positive|similar|other) note)\b[\s,!.~-]*)+",
    re.IGNORECASE,
)
#: intensifiers that add nothing to a fact ("Ana is super excited" → "Ana is excited")
_FLUFF = re.compile(r"\s*\b(?:definitely|actually|literally|honestly|truly|absolutely|totally|seriously|basically|"
                    r"kinda|sorta|super(?=\s+[a-z]))\b,?", re.IGNORECASE)
_VOCATIVE_TAIL = re.compile(r",\s*[A-Z][a-z]+[!.]*$")
_VOCATIVE_HEAD = re.compile(r"^[A-Z][a-z]+,\s+")

FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|mine|myself|we|we're|we've|we'll|we'd|us|our|ours)\b",
                          re.IGNORECASE)
SECOND_PERSON = re.compile(r"\b(?:you|you're|you've|you'd|you'll|your|yours|yourself|u|ur)\b", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:maybe|might|perhaps|probably|i think|i guess|kind of|kinda|sort of|not sure|"
                    r"possibly|i suppose)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """Split a message into sentences (end punctuation, new lines, dashes, semicolons)."""
    parts: list[str] = []
    carry = ""
    for piece in _SENTENCE_END.split(text.strip()):
        piece = piece.strip()
        if not piece:
            continue
        if _ABBREVIATIONS.search(piece):
            carry += piece + " "
            continue
        parts.append((carry + piece).strip())
        carry = ""
    if carry.strip():
        parts.append(carry.strip())
    return parts


def is_question(sentence: str) -> bool:
    """A question asks; it states nothing about the speaker."""
    return sentence.rstrip().endswith("?")


def is_filler(sentence: str) -> bool:
    """A greeting, thanks, agreement or reaction, with nothing else in it."""
    return bool(_FILLER.match(sentence.strip()))


def strip_interjections(sentence: str) -> str:
    """The sentence without leading interjections and vocatives ("Yeah, Jon, I ..." → "I ...")."""
    out = _LEADING.sub("", sentence.strip()).strip(" ,")
    out = _VOCATIVE_HEAD.sub("", out)
    out = _VOCATIVE_TAIL.sub(".", out)
    return out[:1].upper() + out[1:] if out else out


def without_fluff(text: str) -> str:
    """A fact without intensifiers that add nothing to it ("definitely", "actually", "super" …)."""
    out = _FLUFF.sub("", text).strip()
    return out[:1].upper() + out[1:] if out and not text[:1].islower() else out


def words(text: str) -> list[str]:
    return WORD.findall(text)


def content_words(text: str) -> list[str]:
    """Lower-cased words that are not stopwords."""
    return [w for w in (x.lower() for x in WORD.findall(text)) if w not in STOPWORDS and len(w) > 1]


def is_hedged(sentence: str) -> bool:
    return bool(_HEDGE.search(sentence))


# first person → the speaker ----------------------------------------------------------------------
_MODALS = frozenset("can could will would shall should may might must did had was were do does am is are "
                    "have has used ought need".split())
_IRREGULAR_PAST = frozenset("""
went got had made saw took came felt found thought told gave left met bought brought began became kept knew ran
sat said spent won wrote heard lost paid built taught caught fell held led meant sent slept stood understood wore
drove ate drank swam sang flew grew chose forgot put let set cut hit hurt quit read spoke broke woke rode threw
""".split())
_ADVERBS = frozenset("""really just also always never still actually totally truly definitely absolutely usually
often sometimes recently finally even only already rarely seriously honestly kinda sort of mostly generally
now currently no longer
""".split())
_THIRD = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is"}
#: each first-person form: (pattern, as the first mention of the speaker, as a later one ("they"))
_FIRST_FORMS: list[tuple[str, str, str]] = [
    (r"\bI'm\b|\bI am\b", "{n} is", "they are"),
    (r"\bI've\b", "{n} has", "they have"),
    (r"\bI'll\b", "{n} will", "they will"),
    (r"\bI'd\b", "{n} would", "they would"),
    (r"\bwe're\b", "{n} and others are", "they are"),
    (r"\bwe've\b", "{n} and others have", "they have"),
    (r"\bwe'll\b", "{n} and others will", "they will"),
    (r"\bwe'd\b", "{n} and others would", "they would"),
    (r"\bmyself\b", "{n}", "themselves"),
    (r"\bourselves\b", "{n} and others", "themselves"),
    (r"\b(?:mine|ours)\b", "{n}'s", "theirs"),
    (r"\b(?:my|our)\b", "{n}'s", "their"),
    (r"\bwe\b", "{n} and others", "they"),
    (r"(?-i:\bus\b)", "{n} and others", "them"),
    (r"\bme\b", "{n}", "them"),
]
_SECOND_SUBS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\byou're\b", re.IGNORECASE), "{n} is"),
    (re.compile(r"\byou've\b", re.IGNORECASE), "{n} has"),
    (re.compile(r"\byou'll\b", re.IGNORECASE), "{n} will"),
    (re.compile(r"\byou'd\b", re.IGNORECASE), "{n} would"),
    (re.compile(r"\b(?:your|yours|ur)\b", re.IGNORECASE), "{n}'s"),
    (re.compile(r"\byourself\b", re.IGNORECASE), "{n}"),
    (re.compile(r"\byou\b|\bu\b", re.IGNORECASE), "{n}"),
]
_I_VERB = r"\bI\b(\s+(?:(?:" + "|".join(sorted(_ADVERBS)) + r")\s+)*)(don't|do not|[A-Za-z]+)"
#: every first-person form in one pass, in the order of ``_FIRST_FORMS``; then "I" before a verb, then "I"
_FIRST_PERSON_FORMS = re.compile(
    "|".join(f"(?P<f{i}>{pattern})" for i, (pattern, _, _) in enumerate(_FIRST_FORMS))
    + r"|(?P<verb>" + _I_VERB.replace("(\\s+", "(?P<between>\\s+", 1).replace("(don't", "(?P<word>don't", 1) + r")"
    + r"|(?P<bare>\bI\b)",
    re.IGNORECASE,
)
_PLURAL = {"am": "are", "was": "were", "is": "are", "has": "have", "does": "do"}


def third_person(verb: str) -> str:
    """The verb as "she/he/it" says it (present tense): love → loves, try → tries, watch → watches."""
    low = verb.lower()
    if low in _THIRD:
        return _THIRD[low]
    if low in _MODALS or low in _IRREGULAR_PAST or low.endswith("ed") or not low.isalpha():
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def resolve_first_person(sentence: str, speaker: str, mentioned: bool = False) -> str:
    """Rewrite a speaker's first person as statements about them: "I love my dog" said by Ana →
    "Ana loves their dog". The speaker is named once: each later mention (or every one, when
    ``mentioned``: the sentence goes on about a fact that named them) is "they" ("I watch films and
    I cook" → "Ana watches films and they cook")."""
    named = mentioned

    def one(match: re.Match[str]) -> str:
        nonlocal named
        first = not named and speaker not in match.string[: match.start()]
        named = True
        kind = match.lastgroup or ""
        if kind.startswith("f"):
            _, as_first, as_later = _FIRST_FORMS[int(kind[1:])]
            return as_first.format(n=speaker) if first else as_later
        if kind == "verb":
            between, word = match.group("between"), match.group("word")
            if word.lower() in ("don't", "do not"):
                return f"{speaker}{between}doesn't" if first else f"they{between}don't"
            if first:
                return f"{speaker}{between}{third_person(word)}"
            return f"they{between}{_PLURAL.get(word.lower(), word)}"
        return speaker if first else "they"

    return _tidy(later_mentions(_FIRST_PERSON_FORMS.sub(one, sentence), speaker))


def later_mentions(text: str, name: str) -> str:
    """After its first mention, a name's possessive reads "their" and its object "them", as a person
    would write it ("Ana loves Ana's dog" → "Ana loves their dog")."""
    first = text.find(name)
    if first < 0:
        return text
    head, tail = text[: first + len(name)], text[first + len(name):]
    escaped = re.escape(name)
    tail = re.sub(rf"\b{escaped}'s\b", "their", tail)
    tail = re.sub(rf"(\b(?:to|with|for|of|at|about|from|on|by|gave|give|gives|told|tell|tells|helped|helps|"
                  rf"makes|made|let|lets|reminds|reminded|taught|showed|inspired|inspires)\s+){escaped}\b", r"\1them", tail)
    return head + tail


def resolve_second_person(sentence: str, listener: str) -> str:
    """Rewrite "you" as the person spoken to, when known."""
    out = sentence
    for pattern, template in _SECOND_SUBS:
        out = pattern.sub(template.format(n=listener), out)
    return _tidy(out)


def _tidy(text: str) -> str:
    text = re.sub(r"(\w+)'s's\b", r"\1's", text)
    text = re.sub(r"(?<=\S )The (user|assistant)\b", r"the \1", text)
    text = re.sub(r"\s{2,}", " ", text).strip()
    text = re.sub(r"\s+([,.!?])", r"\1", text)
    return text[:1].upper() + text[1:] if text else text


def slug(text: str, limit: int = 4) -> str:
    """A memory-key topic from a phrase: its first content words, ``[a-z0-9_]{1,64}``."""
    found = [w.replace("'", "") for w in content_words(text)][:limit]
    return "_".join(found)[:64].strip("_")

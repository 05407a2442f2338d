"""Which of the 8 categories a statement belongs to, its memory_key when it fills a slot, its
importance (1-5) and the engine's confidence (0-1). Rules read the speaker's own words (first
person, before it is resolved)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.memory import NAMESPACE_FOR_CATEGORY, Category
from services.extractor.domain.text import FIRST_PERSON, is_hedged, slug

C = Category


@dataclass(frozen=True)
class Classification:
    category: Category
    topic: str | None  # set when the statement fills a slot (keyable)
    importance: int
    confidence: float

    @property
    def memory_key(self) -> str | None:
        return f"{NAMESPACE_FOR_CATEGORY[self.category]}.{self.topic}" if self.topic else None


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_RELATIONS = (r"(?:mom|mother|dad|father|parents?|sister|brother|siblings?|wife|husband|partner|spouse|"
              r"boyfriend|girlfriend|fianc[eé]e?|son|daughter|kids?|children|child|grandma|grandmother|"
              r"grandpa|grandfather|aunt|uncle|cousin|niece|nephew|best friend|friend|friends|roommate|"
              r"boss|coworkers?|colleagues?|mentor|family|dog|cat|pets?|puppy|kitten)")

_OCCUPATIONS = (r"(?:engineer|developer|teacher|nurse|doctor|student|designer|manager|writer|artist|lawyer|chef|"
                r"scientist|counsel+or|musician|dancer|programmer|accountant|consultant|researcher|therapist|"
                r"pharmacist|barista|architect|analyst|dentist|pilot|electrician|plumber|journalist|photographer|"
                r"firefighter|paramedic|librarian|mechanic|professor|lecturer|veterinarian|vet|surgeon)")

#: Slot rules: (pattern on the speaker's words, category, topic builder or fixed topic, importance).
#: The first match wins. ``{1}`` style topics use the pattern's first group.
_SLOTS: list[tuple[re.Pattern[str], Category, str, int]] = [
    (_rx(r"\bmy name is\b|\bi'm called\b|\bcall me\b"), C.USER_PROFILE, "name", 5),
    (_rx(r"\bi(?:'m| am) (\d{1,3}) (?:years? old|yo)\b|\bi turned (\d{1,3})\b"), C.USER_PROFILE, "age", 5),
    (_rx(r"\bi(?:'m| am)? (?:now |currently |still )?(?:live|living) in\b|"
         r"\b(?:i|we)(?:'ve| have)? (?:just |recently |finally |now )?(?:moved|relocated) to\b|"
         r"\bi(?:'m| am) (?:now )?based in\b|\bis (?:my |our )?home (?:now|these days)\b"),
     C.USER_PROFILE, "location", 5),
    (_rx(r"\bi(?:'m| am) (?:originally )?from\b|\bi grew up in\b|\bi was born in\b"), C.USER_PROFILE, "hometown", 4),
    (_rx(r"\bi (?:now )?work (?:as|at|for)\b|\bi(?:'m| am) (?:now )?working (?:as|at|for)\b|\bmy job\b|"
         r"\bi got a (?:new )?job (?:at|as|with)\b|\bi started (?:a new job|working) (?:at|as|for)\b|"
         r"\bmy new (?:employer|role|job) is\b|\bi retrained as\b|\bi switched careers\b|"
         r"\bi(?:'m| am| became| have become|'ve become) (?:now )?an? (?:\w+ )?" + _OCCUPATIONS + r"\b"),
     C.USER_PROFILE, "occupation", 5),
    (_rx(r"\bi(?:'m| am) (?:studying|majoring in)\b|\bi graduated\b|\bmy degree\b"), C.USER_PROFILE, "education", 4),
    (_rx(r"\bmy fav(?:ou?rite)? (\w+(?: \w+)?) (?:is|are|was|has to be)\b"), C.PREFERENCE, "favorite_{0}", 3),
    (_rx(r"\bi(?:'m| am)(?: now| no longer| not| a strict| strictly| a)* (?:vegan|vegetarian|pescatarian|allergic to|"
         r"lactose intolerant|gluten.free)\b|\bi(?:'ve| have) been (?:vegan|vegetarian|pescatarian)\b|"
         r"\bi gave up being (?:vegan|vegetarian|pescatarian)\b|\bi eat meat again\b"),
     C.PREFERENCE, "diet", 4),
    (_rx(r"\b(?:please )?(?:keep|make) (?:your |the )?(?:answers?|replies|responses) (\w+)"),
     C.CONVERSATION_STYLE, "answer_length", 4),
    (_rx(r"\bi prefer (?:short|shorter|brief|concise|long|longer|detailed) (?:answers|replies|responses|"
         r"explanations)\b"), C.CONVERSATION_STYLE, "answer_length", 4),
    (_rx(r"\b(?:talk to me|answer|reply|respond) in (\w+)\b"), C.CONVERSATION_STYLE, "language", 4),
    (_rx(r"\bi(?:'m| am) (?:an? )?(introvert|extrovert|ambivert|introverted|extroverted|perfectionist|"
         r"night owl|early bird|morning person)\b"), C.PERSONALITY, "{0}", 3),
    (_rx(r"\bmy (" + _RELATIONS + r")(?:'s name is| is (?:called|named))\b"), C.RELATIONSHIP, "{0}_name", 4),
    (_rx(r"\bi(?:'m| am) (?:now )?(?:single|engaged|married|divorced|widowed)\b|"
         r"\b(?:i|we) (?:just )?got (?:married|engaged|divorced)\b"), C.RELATIONSHIP, "status", 4),
    (_rx(r"\b(?:i|we) (?:now )?have (?:\d+|one|two|three|four|five|six) (?:kids|children|sons|daughters)\b"),
     C.RELATIONSHIP, "children", 4),
    (_rx(r"\b(?:(?:i|we) (?:now )?have|(?:so|that makes|making it)(?: it)?(?: now)?) "
         r"(?:\d+|one|two|three|four|five|six) (dog|cat|rabbit|hamster|parrot|bird|fish|horse|guinea pig)s?\b"),
     C.RELATIONSHIP, "{0}_count", 3),
]

_PREFERENCE = _rx(r"\bi(?:'m| am)? (?:\w+ )?(?:love|like|enjoy|adore|prefer|hate|dislike|can't stand|into|"
                  r"a (?:big |huge )?fan of)\b(?:\s+(?:to|the|a|an|my))?\s+([\w' -]+)")
_GOAL = _rx(r"\bi(?:'m| am|'ve| have)? (?:\w+ )?(?:want|plan|planning|hope|hoping|intend|aim|wish|dream|going|"
            r"thinking about|looking to|decided|trying)"
            r" (?:to |of |on )?([\w' -]+)|\bmy (?:goal|dream|plan)\b")
_SKILL = _rx(r"\bi(?:'m| am|'ve| have)? (?:\w+ )?(?:can|know how to|learned|learnt|taught myself|learning|practice|"
             r"good at|great at|skilled|trained|speak)"
             r" (?:to |how to )?([\w' -]+)")
_EMOTION = _rx(r"\b(?:feel|feeling|felt|stressed|anxious|anxiety|overwhelm\w*|nervous|scared|afraid|lonely|"
               r"depress\w*|sad|upset|angry|frustrat\w*|excited|happy|grateful|thankful|proud|relieved|"
               r"worried|worry|calm|peaceful|joy|hurt|heartbroken|burn(?:ed|t)? out|exhausted)\b")
_RELATIONSHIP = _rx(r"\bmy " + _RELATIONS + r"\b|\bi(?:'m| am| got) (?:married|engaged|divorced|single)\b|"
                    r"\bi(?:'ve| have) (?:a|two|three|\d) " + _RELATIONS + r"\b")
_PERSONALITY = _rx(r"\bi(?:'m| am) (?:a |an |very |pretty |quite |so )?(?:\w+ )?(?:person|type)\b|"
                   r"\bi (?:always|never|tend to|usually)\b|\bi believe\b|\bi value\b|\bi(?:'m| am) "
                   r"(?:shy|outgoing|patient|impatient|stubborn|curious|creative|organized|messy|optimistic|"
                   r"pessimistic|independent|competitive|ambitious|introverted|extroverted)\b")
_HABIT = _rx(r"\bi (?:always|never|tend to|usually)\b")
_STYLE = _rx(r"\b(?:bullet points|be (?:brief|concise|direct|blunt)|no emojis|use emojis|formal|casual tone|"
             r"step by step|explain like)\b")
_DURABLE = _rx(r"\b(?:always|never|every (?:day|week|morning|night)|for (?:\d+|many|a few) years|since i was)\b")
_STRONG = _rx(r"\b(?:love|hate|passion\w*|dream|really|so much|huge|important|mean[st]? a lot)\b")
_EPHEMERAL = _rx(r"\b(?:today|tonight|this morning|right now|later|yesterday|last night|this weekend)\b")


#: A first-person statement that says a fact of the speaker's changed or ended: always kept (a
#: memory must not miss that what it holds stopped being true; issue 30's log path).
_CHANGE = _rx(r"\bno longer\b|\bnot (?:\w+ ){0,3}any ?more\b|\b(?:stopped|quit|gave up|came off|gone off|"
              r"recovered from|outgrew|rehomed|was diagnosed with|switched (?:to|from|careers))\b")


def states_a_change(said: str) -> bool:
    """Whether the speaker's words say that one of their facts changed or ended."""
    return bool(FIRST_PERSON.search(said) and _CHANGE.search(said))


def classify(said: str) -> Classification:
    """Classify a statement in the speaker's own words."""
    low = said.lower()
    for pattern, category, topic, importance in _SLOTS:
        match = pattern.search(said)
        if match:
            groups = [g for g in match.groups() if g]
            name = topic.format(*[slug(g, 3) or "x" for g in groups]) if "{" in topic and groups else topic
            return Classification(category, _clean_topic(name), importance, _confidence(said, 0.85))
    for pattern, category, importance, keyed in (
        (_STYLE, C.CONVERSATION_STYLE, 3, False),
        (_HABIT, C.PERSONALITY, 3, False),
        (_GOAL, C.GOAL, 4, True),
        (_PREFERENCE, C.PREFERENCE, 3, True),
        (_SKILL, C.SKILL, 3, True),
        (_RELATIONSHIP, C.RELATIONSHIP, 3, False),
        (_PERSONALITY, C.PERSONALITY, 3, False),
        (_EMOTION, C.EMOTIONAL_PATTERN, 3, False),
    ):
        match = pattern.search(said)
        if match:
            topic = None
            if keyed and match.groups() and match.group(1):
                topic = _clean_topic(slug(match.group(1), 3))
            if category is C.GOAL and topic:
                topic = _clean_topic(slug(match.group(1), 2))
            return Classification(category, topic, _importance(low, importance), _confidence(said, 0.75))
    return Classification(C.USER_PROFILE, None, _importance(low, 2), _confidence(said, 0.7))


def _clean_topic(topic: str | None) -> str | None:
    if not topic:
        return None
    topic = re.sub(r"[^a-z0-9_]+", "_", topic.lower()).strip("_")[:64].strip("_")
    return topic or None


def _importance(low: str, base: int) -> int:
    value = base
    if _STRONG.search(low) or _DURABLE.search(low):
        value += 1
    if _EPHEMERAL.search(low):
        value -= 1
    return max(1, min(5, value))


def _confidence(said: str, base: float) -> float:
    value = base
    if is_hedged(said):
        value -= 0.25
    if not FIRST_PERSON.search(said):
        value -= 0.15  # a statement the speaker did not make about themselves
    elif re.search(r"\b(?:we|us|our)\b", said, re.IGNORECASE) and not re.search(r"\b(?:I|my|me)\b", said):
        value -= 0.1
    return round(max(0.1, min(1.0, value)), 2)

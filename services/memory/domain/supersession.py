"""Whether a new memory changes, repeats or leaves alone a memory already held.

Pure rules, no I/O. The caller gives a new memory (:class:`Statement`) and the current memories
of the same user and project it found near it (:class:`Candidate`, each with the cosine
similarity of its embedding to the new one's); :func:`decide` answers, per candidate, one of:

- ``SUPERSEDES`` - the same subject and attribute with another value ("I live in Lisbon" →
  "I moved to Berlin"), a negation of what was held ("I no longer eat meat"), a changed number
  or date in the same sentence, the same ``memory_key`` with another content. The later of the
  two (by ``created_at``) is the current one: :attr:`Decision.stale` says which is superseded, so
  a fact extracted late from an old log never overrides what was said after it;
- ``DUPLICATE`` - the same meaning (same subject, attribute and value; or the same sentence):
  merge them;
- ``UNCERTAIN`` - something changed or repeats, perhaps, but the rules cannot say what: flagged
  for a person or an agent, never resolved silently (text the rules cannot read, a second pet
  of one kind, a change marker with no attribute found);
- ``UNRELATED`` - both stand (another subject: "my sister lives in Lisbon" is not "I live in
  Lisbon"; another attribute; another item of a many-valued attribute: liking tea and coffee).

Rules decide first: each sentence is read into facts (:func:`read_facts`: subject, attribute,
value, polarity) from common phrasings about places, jobs, relationships, pets, preferences,
health, numbers and plans. The embedding similarity is a gate (a rule's verdict on two texts that
are far apart in meaning is only UNCERTAIN) and decides when the rules read nothing. The
thresholds are named constants (:class:`Thresholds`), fitted on the fit split of
``bench/data/fact_changes.jsonl`` only (``bench/truth_rules.py``).

The approach borrows from two peers, rewritten: Graphiti invalidates an edge contradicted by a
newer one between the same entities (and only if the old one was valid first); mem0 decides per
extracted fact ADD / UPDATE / DELETE / NONE against the nearest memories. Here it is rules and
embeddings, offline and deterministic; an LLM engine, when configured, may answer the same
question with the same four verdicts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import lru_cache

from services.memory.domain.keywords import STOPWORDS


class Verdict(StrEnum):
    SUPERSEDES = "supersedes"
    DUPLICATE = "duplicate"
    UNCERTAIN = "uncertain"
    UNRELATED = "unrelated"


@dataclass(frozen=True)
class Thresholds:
    """The similarity thresholds (cosine of the two embeddings), fitted on the fit split only.

    - ``rule_gate``: a rule's SUPERSEDES or DUPLICATE on two texts less similar than this is
      only UNCERTAIN (the rule may have read a sentence wrong);
    - ``duplicate``: two texts the rules read no facts in are DUPLICATE from this similarity on,
      when their content words and numbers agree too;
    - ``uncertain``: two texts the rules cannot settle are flagged UNCERTAIN from this
      similarity on when one of them marks a change ("now", "no longer", …) or when they are
      nearly the same text; below it they are UNRELATED;
    - ``fact_duplicate``: two texts stating the same fact are DUPLICATE when they are this
      similar or share half their content words (else one says something the other does not).
    """

    rule_gate: float = 0.1
    duplicate: float = 0.88
    uncertain: float = 0.75
    fact_duplicate: float = 0.7


#: The thresholds in use: fitted by ``bench/truth_rules.py --fit`` on the fit split (2026-12-04:
#: rule_gate 0.1, duplicate 0.88, uncertain 0.75, fact_duplicate 0.7; at a tie the most cautious).
DEFAULT_THRESHOLDS = Thresholds()
#: Share of the shorter text's words two texts the rules cannot read (another language) must share
#: to be flagged even when the encoder, trained on English, finds them apart.
FOREIGN_SHARED_WORDS = 0.5
#: Share of content words two texts must share (of the larger set) to be the same sentence when
#: the rules read no fact in them; and at most this many content words may differ between them:
#: one word more, never one word for another ("progress item 1 legacy" / "progress item 1
#: stateless", "meeting with Anna" / "meeting with Bob" are two things; 3 merged them once wired
#: in; 1 keeps pairwise repeats merged at 0.93 fit / 0.94 report, 0 would at 0.84).
SAME_WORDS = 0.6
MAX_WORDS_APART = 1
#: Two texts stating the same fact share at least this share of content words (or are
#: ``fact_duplicate`` similar): else one says more than the other.
FACT_SHARED_WORDS = 0.5
#: "I switched from coffee" ends "coffee" in another memory the rules read no fact in only when
#: that memory is a short statement (a long one says other things too).
SHORT_STATEMENT_WORDS = 15
#: Texts the rules read no fact in are flagged only when both are statements of at most this many
#: words: long passages (a conversation turn saved whole) are near each other without either
#: changing the other, and a flag a person must settle has to be worth their time.
FLAG_MAX_WORDS = 30
#: ... and, for a change word ("now", "no longer") to flag them, share this share of content words.
FLAG_SHARED_WORDS = 0.3


@dataclass(frozen=True)
class Statement:
    """A memory as these rules read it: the new one."""

    content: str
    created_at: datetime
    category: str | None = None
    memory_key: str | None = None
    project: str = "default"


@dataclass(frozen=True)
class Candidate(Statement):
    """A current memory near the new one, with the cosine similarity of their embeddings."""

    similarity: float = 0.0
    ref: Hashable | None = None  # the caller's handle (a memory id), handed back in the Decision


@dataclass(frozen=True)
class Fact:
    """What a sentence says: ``subject``'s ``attribute`` is ``value`` (``negated``: is no longer)."""

    subject: str
    attribute: str
    value: str
    negated: bool = False
    replaces: str | None = None  # "switched from X to Y": X, the value this one ends


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    confidence: float
    candidate: Candidate
    stale: str | None = None  # SUPERSEDES: which one is superseded, "candidate" or "new"
    facts: tuple[Fact | None, Fact | None] = field(default=(None, None))  # (new's, candidate's)
    decided_by: str = "rules"  # or "llm": the LLM judge settled a pair the rules could not

    @property
    def new_supersedes(self) -> bool:
        return self.verdict is Verdict.SUPERSEDES and self.stale == "candidate"


@dataclass(frozen=True)
class Opinion:
    """An LLM judge's answer on one pair: one of the four verdicts, how sure, and why."""

    verdict: Verdict
    confidence: float
    reason: str


#: An LLM judge's verdict settles a pair the rules flagged only when it is at least this sure
#: (and says more than "uncertain"); else the flag stands for a person or an agent.
LLM_MIN_CONFIDENCE = 0.8


def second_opinion(flagged: Decision, opinion: Opinion, new: Statement) -> Decision:
    """The decision on a pair the rules found UNCERTAIN, once an LLM judge answered: its verdict
    when it is sure, the later of the two being current for a change (as the rules decide it);
    else the flag, unchanged."""
    if flagged.verdict is not Verdict.UNCERTAIN or opinion.verdict is Verdict.UNCERTAIN \
            or opinion.confidence < LLM_MIN_CONFIDENCE:
        return flagged
    stale = None
    if opinion.verdict is Verdict.SUPERSEDES:
        stale = "candidate" if flagged.candidate.created_at <= new.created_at else "new"
    return Decision(verdict=opinion.verdict, reason=opinion.reason, confidence=opinion.confidence,
                    candidate=flagged.candidate, stale=stale, facts=flagged.facts, decided_by="llm")


# ------------------------------------------------------------------------------------------
# reading facts

#: Attributes that hold one value at a time: another value replaces the old one.
SINGLE_VALUED = frozenset({
    "favorite", "when", "location", "employer", "occupation", "relationship_status", "partner", "diet", "age", "school",
    "commute", "car", "phone", "language", "team",
})
#: Attributes that hold many values at once: another value is another item, not a change.
MANY_VALUED = frozenset({"likes", "allergy", "medication", "condition", "pet", "plan", "hobby", "skill"})

_RELATIONS = (
    r"mom|mother|dad|father|parents|sister|brother|wife|husband|partner|spouse|boyfriend|girlfriend|"
    r"fianc[eé]e?|son|daughter|kids|children|grandma|grandmother|grandpa|grandfather|aunt|uncle|cousin|"
    r"niece|nephew|best friend|friend|roommate|boss|coworker|colleague|mentor|neighbou?r|landlord|"
    r"manager|team|doctor|therapist|dog|cat"
)
_NAME = r"(?!I\b|My\b|We\b|The\b|This\b|That\b|Now\b|So\b|Actually\b|Also\b|But\b|And\b|Well\b)[A-Z][a-z]+"
#: The subject of a clause: I, we, my <relation>, a capitalised name, he/she/they.
_SUBJ = (rf"(?P<s>\bI\b|\b[Ww]e\b|\b[Mm]y (?:(?:older|younger|little|big|best|new|old|ex|eldest|oldest|"
         rf"youngest) )?(?:{_RELATIONS})\b|\b{_NAME}\b|\b[Hh]e\b|\b[Ss]he\b|\b[Tt]hey\b)")
_ADV = r"(?:\s+(?:now|currently|still|also|actually|finally|just|recently|officially|already|since))*"
_BE = r"(?:'m|'s|'re|\s+am|\s+is|\s+are|\s+was|\s+were|\s+has been|\s+have been|'ve been)"
_HAVE = r"(?:\s+have|\s+has|'ve|\s+had)?"
_V = r"(?P<v>[^,.;!?()]+)"
_ROLES = (
    r"engineer|developer|teacher|nurse|doctor|student|designer|manager|writer|artist|lawyer|chef|scientist|"
    r"counsel+or|musician|dancer|programmer|accountant|consultant|researcher|therapist|architect|analyst|"
    r"pilot|pharmacist|librarian|photographer|journalist|editor|professor|lecturer|director|founder|"
    r"freelancer|intern|baker|barista|electrician|plumber|carpenter|mechanic|paramedic|firefighter|"
    r"veterinarian|vet|dentist|surgeon|translator|product owner|data scientist|sales rep|recruiter|cto|ceo"
)
_PETS = r"dog|cat|puppy|kitten|parrot|rabbit|bunny|hamster|turtle|tortoise|horse|fish|goldfish|snake|lizard|guinea pig"
_DIETS = r"vegan|vegetarian|pescatarian|keto|paleo|gluten[- ]free|lactose[- ]free|carnivore|on a diet|fasting"
_DATE = (r"(?P<v>(?:(?:the\s+)?\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?:January|February|March|April|May|June|"
         r"July|August|September|October|November|December|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|"
         r"Sunday|next (?:week|month|year)|\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?)(?:\s+\d{1,2}(?:st|nd|rd|th)?)?"
         r"(?:,?\s+\d{4})?)")
_STATUSES = r"married|single|engaged|divorced|separated|widowed|in a relationship|seeing someone"


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _i(pattern: str) -> str:
    """``pattern`` case-insensitive, as a scoped inline group."""
    return f"(?i:{pattern})"


#: (attribute, negated, pattern). A pattern has group ``s`` (subject) unless the subject is the
#: speaker, group ``v`` (value), optionally ``a`` (the attribute's own name: "my favourite *tea*")
#: and ``r`` (the value it replaces). Tried in order; every match yields a fact.
_PATTERNS: list[tuple[str, bool, re.Pattern[str]]] = [
    # switched / changed from X to Y: a change of whatever attribute held X
    ("*", False, _rx(_SUBJ + _ADV + _HAVE + _i(r"\s+(?:switched|changed|moved|went|converted|upgraded|downgraded)"
                                                  r"\s+from\s+(?:an?\s+|the\s+|my\s+)?(?P<r>[^,.;!?]+?)\s+to\s+") + _V)),
    ("*", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:drink|drinks|eat|eats|use|uses|take|takes|prefer|prefers|play|plays|"
                                       r"drive|drives|ride|rides|listen to|listens to)\s+(?P<v>[^,.;!?]+?)\s+instead of\s+"
                                       r"(?:an?\s+|the\s+|my\s+)?(?P<r>[^,.;!?]+)"))),
    # dates of plans and events: my trip to X is in May / we moved the wedding to June 3
    ("when", False, _rx(_i(r"\b(?:my|our|the)\s+(?P<a>(?:trip|journey|holiday|vacation|flight|visit)\s+to\s+[\w ]+?|"
                           r"[\w]+\s+(?:trip|holiday|vacation)|wedding|appointment|interview|exam|surgery|party|"
                           r"birthday party|concert|move|operation|defen[cs]e)(?:\s+date)?\s+(?:is|was|has been)?\s*"
                           r"(?:now\s+)?(?:in|on|for|moved to|pushed to|pushed back to|postponed to|changed to|"
                           r"rescheduled for|rescheduled to|set for)\s+") + _DATE)),
    ("when", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:moved|pushed|pushed back|postponed|rescheduled|changed)"
                                                         r"\s+(?:the|our|my)\s+(?P<a>(?:trip|flight|visit)\s+to\s+"
                                                         r"[\w ]+?|\w+\s+(?:trip|holiday|vacation)|wedding|appointment|"
                                                         r"interview|exam|surgery|party|concert|operation)\s+"
                                                         r"(?:to|for|until)\s+") + _DATE)),
    ("when", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:going|flying|travelling|traveling|heading)\s+to\s+"
                                                r"(?P<a>[A-Z][\w ]*?)\s+(?:in|on)\s+") + _DATE)),
    ("plan", True, _rx(_i(r"\b(?:the|my|our)\s+(?P<v>[\w ]+?\s+trip|trip\s+to\s+[\w ]+?|wedding|party|move)\s+"
                          r"(?:is|was|has been)\s+(?:off|cancell?ed|called off)\b"))),
    # places
    ("location", True, _rx(_SUBJ + _ADV + _i(r"\s+(?:no longer|don't|do not|doesn't|does not|stopped)\s+"
                                             r"(?:lives?|living|reside)\s+in\s+") + _V)),
    ("location", True, _rx(_SUBJ + _ADV + _HAVE + _i(r"\s+(?:moved|moving)\s+(?:out of|away from)\s+") + _V)),
    ("location", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:live|lives|reside|resides)\s+in\s+") + _V)),
    ("location", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:living|based|located|settled|residing)\s+in\s+") + _V)),
    ("location", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:moved|relocated|moved back|emigrated|"
                                                              r"settled down)\s+(?:to|into|in)\s+") + _V)),
    ("location", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:moving|relocating)\s+to\s+") + _V)),
    ("location", False, _rx(r"(?P<v>" + _NAME + r"(?: " + _NAME + r")?)" + _i(r"\s+is\s+(?:now\s+)?(?:my\s+)?"
                                                                             r"(?:new\s+)?home\b"))),
    ("location", False, _rx(_i(r"\bmy\s+(?:new\s+)?(?:home|place|address)\s+is\s+(?:now\s+)?(?:in\s+)?") + _V)),
    # jobs
    ("employer", True, _rx(_SUBJ + _ADV + _i(r"\s+(?:no longer|don't|do not|doesn't)\s+work\s+(?:at|for)\s+") + _V)),
    ("employer", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:quit|left|resigned from|was laid off from|"
                                                             r"got laid off from|got fired from)\s+(?:my job at\s+)?") + _V)),
    ("employer", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:work|works)\s+(?:at|for)\s+") + _V)),
    ("employer", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:working|employed)\s+(?:at|for|by)\s+") + _V)),
    ("employer", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(
        r"\s+(?:started (?:a (?:new )?job |working )?(?:at|for)|got a (?:new )?job (?:at|with)|"
        r"accepted an offer from|took a (?:new )?job (?:at|with)|was hired by|got hired (?:at|by))\s+") + _V)),
    ("employer", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+joined\s+")
                            + r"(?P<v>[A-Z][\w.&'-]*(?:\s+[A-Z][\w.&'-]*)*)")),
    ("employer", False, _rx(_i(r"\bmy\s+first\s+day\s+(?:at|with)\s+(?:my\s+new\s+job\s+at\s+)?") + _V)),
    ("employer", False, _rx(_i(r"\bmy\s+(?:new\s+)?(?:employer|company)\s+is\s+(?:now\s+)?") + _V)),
    ("occupation", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:work|works)\s+as\s+(?:an?\s+)?") + _V)),
    ("occupation", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:became|got promoted to|was promoted to|"
                                                                r"retrained as)\s+(?:an?\s+|the\s+)?") + _V)),
    ("occupation", False, _rx(_i(r"\bmy\s+(?:new\s+)?(?:job title|role|position|profession)\s+is\s+(?:now\s+)?"
                                 r"(?:an?\s+)?") + _V)),
    ("occupation", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:an?\s+)?(?P<v>(?:[a-z-]+\s+){0,2}(?:" + _ROLES + r"))\b"))),
    # relationships
    ("relationship_status", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:now\s+)?(?P<v>" + _STATUSES + r")\b"))),
    ("relationship_status", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+got\s+(?P<v>married|engaged|divorced)\b"))),
    ("partner", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:broke up with|split up with|split from|"
                                                            r"divorced|left|separated from)\s+") + _V)),
    ("partner", True, _rx(r"(?P<v>" + _NAME + r")" + _i(r"\s+and\s+I\s+(?:have\s+)?(?:broke up|split up|split|"
                                                       r"separated|divorced|are over|are done)\b"))),
    ("partner", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:no longer|not)\s+(?:with|dating|seeing|together with|"
                                                  r"married to|engaged to)\s+") + _V)),
    ("partner", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:dating|seeing|with|engaged to|married to)\s+") + _V)),
    ("partner", False, _rx(_i(r"\bmy\s+(?:new\s+)?(?:wife|husband|partner|spouse|girlfriend|boyfriend|fianc[eé]e?)"
                              r"(?:'s name)?\s+is\s+(?:now\s+)?(?:called\s+|named\s+)?") + _V)),
    # pets
    ("pet", True, _rx(_SUBJ + _ADV + _i(r"(?:'s|\s+has|\s+have)?\s+(?:lost|had to put down|rehomed|gave away)\s+"
                                        r"(?:(?:my|our|his|her)\s+(?:" + _PETS + r")\s+)?") + r"(?P<v>" + _NAME + r")\b")),
    ("pet", True, _rx(r"(?P<v>" + _NAME + r")" + _i(r"\s+(?:has\s+)?(?:passed away|died|ran away|is gone)\b"))),
    ("pet", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+renamed\s+(?:the|our|my)\s+(?P<a>" + _PETS + r")\s+") + _V)),
    ("pet", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:got|have|has|adopted|own|owns)\s+an?\s+(?:new\s+)?"
                                                         r"(?P<a>" + _PETS + r")\s+(?:named|called)\s+") + _V)),
    ("pet", False, _rx(_i(r"\bmy\s+(?:new\s+)?(?P<a>" + _PETS + r")(?:'s\s+name\s+is\s+(?:now\s+)?|\s+is\s+"
                          r"(?:now\s+)?(?:called|named)\s+)") + _V)),
    # preferences
    ("favorite", False, _rx(_i(r"\bmy\s+(?:new\s+|current\s+)?fav(?:ou?rite)?\s+(?P<a>[a-z]+(?:\s+[a-z]+)?)\s+"
                               r"(?:these days\s+|nowadays\s+|now\s+)?(?:is|are|has to be)\s+(?:now\s+)?") + _V)),
    ("favorite", False, _rx(r"(?P<v>\b(?!(?:say|think|guess|that|days|so|and|but|I'd|I)\b)(?:[A-Z][\w'-]*+|[a-z]++)"
                            r"(?: [A-Z][\w'-]*+)*)" + _i(r"\s+is\s+(?:now\s+)?my\s+(?:new\s+)?"
                                                             r"fav(?:ou?rite)?\s+(?P<a>[a-z]+(?:\s+[a-z]+)?)"))),
    ("diet", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:no longer|not)\s+(?:an?\s+)?(?P<v>" + _DIETS + r")\b"))),
    ("diet", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:now\s+)?(?:an?\s+)?(?:strict\s+)?(?P<v>" + _DIETS + r")\b"))),
    ("diet", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:went|gone|turned)\s+(?P<v>" + _DIETS + r")\b"))),
    ("likes", True, _rx(_SUBJ + _ADV + _i(r"\s+(?:no longer|don't|do not|doesn't|does not|stopped|can't|cannot)\s+"
                                          r"(?:really\s+)?(?:like|love|enjoy|liking|loving|enjoying|stand|drink|eat|"
                                          r"drinking|eating)\s+") + _V)),
    ("likes", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:hate|hates|dislike|dislikes|detest|detests|can't stand|"
                                          r"cannot stand|gave up|quit|gone off|went off|got tired of|lost my taste for)\s+") + _V)),
    ("likes", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:no longer|not)\s+(?:into|a fan of)\s+") + _V)),
    ("likes", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:really\s+)?(?:like|likes|love|loves|enjoy|enjoys|adore|adores|"
                                           r"prefer|prefers)\s+") + _V)),
    ("likes", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:really\s+)?(?:into|a (?:big |huge )?fan of)\s+") + _V)),
    # health
    ("allergy", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:outgrew|grew out of|got over)\s+(?:my|his|her)\s+"
                                                            r"(?P<v>[^,.;!?()]+?)\s+allergy\b"))),
    ("allergy", True, _rx(_i(r"\bmy\s+(?P<v>[^,.;!?()]+?)\s+allergy\s+is\s+(?:gone|over|cured)\b"))),
    ("allergy", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:no longer|not)\s+allergic\s+to\s+") + _V)),
    ("allergy", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+allergic\s+to\s+") + _V)),
    ("medication", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:stopped|quit|came off)\s+(?:taking\s+)?") + _V)),
    ("medication", True, _rx(_i(r"\b(?:my\s+)?(?:doctor|gp|psychiatrist)\s+(?:took|taken)\s+me\s+off\s+") + _V)),
    ("medication", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:no longer|not)\s+(?:on|taking)\s+") + _V)),
    ("medication", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:take|takes)\s+") + _V)),
    ("medication", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:taking|on)\s+(?P<v>[^,.;!?()]*?\b(?:mg|pills?|tablets?|"
                                                      r"medication|inhaler|insulin)\b[^,.;!?()]*)"))),
    ("condition", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:recovered from|got over|beat|no longer have)\s+") + _V)),
    ("condition", True, _rx(_i(r"\bmy\s+(?P<v>[^,.;!?()]+?)\s+(?:is|has)\s+(?:now\s+)?(?:gone|cured|healed|"
                               r"under control|in remission)\b"))),
    ("condition", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:was|got|been)\s+diagnosed\s+with\s+") + _V)),
    # plans
    ("plan", True, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+(?:cancelled|canceled|called off|gave up on|"
                                                         r"dropped|postponed)\s+(?:my\s+|our\s+|the\s+)?") + _V)),
    ("plan", True, _rx(_SUBJ + _BE + _ADV + _i(r"\s+no longer\s+(?:going to|planning to|planning on)\s+") + _V)),
    ("plan", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?:planning|going|hoping)\s+(?:to|on)\s+") + _V)),
    ("plan", False, _rx(_SUBJ + _ADV + _i(r"\s+(?:plan|plans|intend|intends|want|wants)\s+to\s+") + _V)),
    ("age", False, _rx(_SUBJ + _BE + _ADV + _i(r"\s+(?P<v>\d{1,3})\s+(?:years old|yo|years of age)\b"))),
    ("age", False, _rx(_SUBJ + _ADV + _HAVE + _ADV + _i(r"\s+turned\s+(?P<v>\d{1,3})\b"))),
    ("*", False, _rx(_i(r"\bmy\s+(?P<a>[a-z]+(?:\s+[a-z]+)?)\s+(?:went up|went down|rose|increased|decreased|dropped|"
                        r"fell|changed|is up|is down|has gone up|has gone down)\s+to\s+") + _V)),
    # generic: my <attribute> is <value> (third person: <Name>'s <attribute> is <value>)
    ("*", False, _rx(_i(r"\bmy\s+(?!fav)(?:new\s+|current\s+)?(?P<a>[a-z]+(?:\s+[a-z]+)?)(?:'s\s+(?P<a2>[a-z]+))?"
                        r"\s+(?:is|are)\s+(?:now\s+|currently\s+|still\s+)?") + _V)),
]

#: Words that end a value: what follows is time, place of the change, or another clause.
_VALUE_END = re.compile(
    r"\s+(?:last|this|next|since|because|as of|for|from|after|before|until|when|while|and|but|so|now|"
    r"anymore|any more|these days|nowadays|again|today|yesterday|recently|instead|though|although|"
    r"which|who|where|as an?|as the|at the moment|right now|full[- ]time|part[- ]time|in (?:january|february|march|april|"
    r"may|june|july|august|september|october|november|december|\d{4}|the (?:spring|summer|autumn|fall|winter))"
    r"|over|rather than|than|with|ever since|every|each)\b.*$",
    re.IGNORECASE,
)
_LEAD = re.compile(r"^(?:the|a|an|my|our|his|her|their|some|to|in)\s+", re.IGNORECASE)
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "a couple of": "2",
}
_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_NUMERIC = re.compile(
    rf"\b(?:\d+(?:[.,:/-]\d+)*(?:st|nd|rd|th|k|km|kg|mg|am|pm|h)?|(?:{'|'.join(_NUMBER_WORDS)})|"
    rf"(?:{_MONTHS})|(?:{_WEEKDAYS}))\b",
    re.IGNORECASE,
)
#: Words that mark the sentence as a change of something held before.
CHANGE_MARKERS = re.compile(
    r"\b(?:now|no longer|not any ?more|anymore|any more|switched|moved|changed|instead|these days|nowadays|"
    r"stopped|quit|used to|turns out|cancelled|canceled|postponed|rescheduled|broke up|divorced|sold|renamed|"
    r"went up|went down|increased|decreased|rose|dropped)\b",
    re.IGNORECASE,
)
#: A sentence about a moment: the same words on two days are two events.
_MOMENT = re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening)|yesterday|last night|right now)\b",
                     re.IGNORECASE)
_PRONOUNS = frozenset({"he", "she", "they"})
_NEGATION = re.compile(r"\b(?:not|no longer|never|n't|don't|doesn't|didn't|isn't|aren't|wasn't|stopped|quit)\b",
                       re.IGNORECASE)
#: A word, or one emoji or pictograph ("I love 🍣" and "I love 🏔" are two things, not one sentence).
_WORD = re.compile(r"[^\W_]+(?:'[a-z]+)?|[\u2600-\u27bf\U0001f000-\U0001faff]", re.UNICODE)
_FILLER_WORDS = frozenset("""
now currently still actually really just also recently finally officially already anymore these days nowadays
usually normally generally typically regularly
""".split())
#: "every week on Mondays" is "on Mondays": a weekday said as a habit needs no "every week".
_WEEKLY = re.compile(r"\bevery week\b(?=.{0,200}?\b(?:mon|tues|wednes|thurs|fri|satur|sun)days?\b)"
                     r"|(?<=days)\s+every week\b", re.IGNORECASE)
#: Small words that turn a sentence's meaning ("before" / "after" the trip): texts that differ in
#: one are never merged as the same words, however close their embeddings.
_TURNING_WORDS = frozenset("""
before after not never no without until since above below more less first last next previous
earlier later early late yes
""".split())
_STOP = frozenset("""
a an the i i'm i've i'd me my mine we our us you your he she they his her their it its is are was were be been
am to of in on at for with by from and or but so that this these those as not no do does did have has had
""".split()) | _FILLER_WORDS


#: Capitalised words that start sentences and are no one's name.
_NOT_NAMES = frozenset("""
sounds looks seems feels thanks thank sorry yeah yes yep nope wow hey hi hello oh ah well anyway everyone someone
nobody people today tomorrow yesterday sometimes maybe also still definitely totally honestly glad great good
""".split())
#: Values that name nothing to compare.
_VAGUE_VALUES = frozenset("it them that this fun things stuff something everything lot lots".split())


def normalize(text: str) -> str:
    """NFC, curly quotes made straight, whitespace collapsed."""
    text = unicodedata.normalize("NFC", text).replace("’", "'").replace("‘", "'")
    return " ".join(text.split())


def _clean_value(raw: str) -> str:
    value = _VALUE_END.sub("", " " + raw.strip()).strip()
    for _ in range(3):
        value = _LEAD.sub("", value)
    value = re.sub(r"[\"'`]+$|^[\"'`]+", "", value).strip().casefold()
    words = value.split()
    return " ".join(words[:5])


def _subject(raw: str | None) -> str | None:
    """The subject as compared: "user" for the speaker, a relation, a name; None when the word
    read as a name is a common word ("Sounds like fun", "Thanks")."""
    if raw is None:
        return "user"
    low = raw.casefold()
    if raw[:1].isupper() and low not in ("i", "we", "he", "she", "they") and not low.startswith("my ") and (
            low in STOPWORDS or low in _NOT_NAMES):
        return None
    if low in ("i", "we"):
        return "user"
    if low.startswith("my "):
        words = low.split()[1:]
        return " ".join(w for w in words if w not in ("older", "younger", "little", "big", "eldest", "oldest",
                                                     "youngest", "new", "old"))
    return low  # a name, or he / she / they (resolved by nobody here: compared as written)


#: The phrasing rules read statements, not documents: the first this many characters of a text
#: (cut at a sentence's end where there is one). A fact is said in a sentence; a memory of 200,000
#: characters (a pasted document) once held the memory service's worker thread, and with it the
#: event loop through the GIL, for minutes. Two texts either of which is longer than this are one
#: memory only when they are the same text (:func:`decide`).
RULES_READ_CHARS = 4_000
#: ... one sentence at a time, a longer run of words cut into pieces of at most this many characters.
#: Each pattern is tried within one piece, so its backtracking is bounded by the piece, not the text.
SENTENCE_CHARS = 500
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def rule_sentences(text: str) -> list[str]:
    """The pieces of ``text`` the phrasing rules read: its sentences (normalized) within the first
    :data:`RULES_READ_CHARS` characters, each at most :data:`SENTENCE_CHARS` long."""
    head = normalize(text[: RULES_READ_CHARS * 2])  # normalizing only drops characters
    if len(head) > RULES_READ_CHARS:
        cut = max(head.rfind(". ", 0, RULES_READ_CHARS), head.rfind("? ", 0, RULES_READ_CHARS),
                  head.rfind("! ", 0, RULES_READ_CHARS))
        head = head[: cut + 1] if cut > 0 else _cut_at_space(head, RULES_READ_CHARS)
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(head):
        while len(sentence) > SENTENCE_CHARS:
            piece = _cut_at_space(sentence, SENTENCE_CHARS)
            pieces.append(piece)
            sentence = sentence[len(piece):].lstrip()
        if sentence:
            pieces.append(sentence)
    return pieces


def _cut_at_space(text: str, limit: int) -> str:
    """``text``'s first ``limit`` characters, cut before the last space among them (if any)."""
    space = text.rfind(" ", 0, limit + 1)
    return text[:space] if space > 0 else text[:limit]


def read_facts(text: str) -> tuple[Fact, ...]:
    """The facts ``text`` states, by the phrasing rules (empty when none applies), read in
    :func:`rule_sentences`; in the order of the rules, then of the text."""
    return _facts_in(tuple(rule_sentences(text)))


@lru_cache(maxsize=8192)
def _facts_in(pieces: tuple[str, ...]) -> tuple[Fact, ...]:
    found: list[tuple[int, int, int, Fact]] = []
    for p, piece in enumerate(pieces):
        found += [(rule, p, start, fact) for rule, start, fact in _facts_of_piece(piece)]
    return tuple(fact for *_, fact in sorted(found, key=lambda f: f[:3]))


def _facts_of_piece(text: str) -> list[tuple[int, int, Fact]]:
    facts: list[tuple[int, int, Fact]] = []
    taken: list[tuple[int, int]] = []
    for rule, (attribute, negated, pattern) in enumerate(_PATTERNS):
        for match in pattern.finditer(text):
            span = match.span("v") if "v" in pattern.groupindex and match.group("v") else match.span()
            if any(a < span[1] and span[0] < b for a, b in taken):  # an earlier (more specific) rule read it
                continue
            groups = match.groupdict()
            if attribute == "when":
                value = " ".join((groups.get("v") or "").casefold().split())
            else:
                value = _clean_value(groups.get("v") or "")
            if not value or attribute == "location" and _NUMERIC.fullmatch(value):
                continue
            if attribute != "when" and not content_words(value) - _VAGUE_VALUES:  # "it", "them", "fun"
                continue
            subject = _subject(groups.get("s"))
            if subject is None:
                continue
            name = attribute
            if attribute == "*" and groups.get("r"):
                name = "*"
            elif attribute == "*":
                name = re.sub(r"\s+", "_", (groups.get("a") or "").casefold())
                if groups.get("a2"):  # my sister's city is …: the sister's city
                    subject, name = name.replace("_", " "), groups["a2"].casefold()
                name = _ATTRIBUTE_ALIASES.get(name, name)
            elif attribute == "when":
                name = "when:" + _event_name(groups.get("a") or "")
            elif attribute in ("favorite", "pet") and groups.get("a"):
                name = attribute + ":" + "_".join(groups["a"].casefold().split())
            replaces = _clean_value(groups["r"]) if groups.get("r") else None
            facts.append((rule, span[0], Fact(subject, name, value, negated, replaces)))
            taken.append(span)
    return facts


def _event_name(raw: str) -> str:
    """One name for one planned event however it is said: "the Japan trip", "my trip to Japan",
    "going to Japan" are all "trip_to_japan"."""
    words = raw.casefold().split()
    if len(words) == 2 and words[1] in ("trip", "holiday", "vacation"):
        words = ["trip", "to", words[0]]
    elif words and words[0] in ("journey", "holiday", "vacation", "visit", "flight"):
        words = ["trip", *words[1:]]
    elif words and words[0] not in ("trip",) and len(words) <= 3 and raw[:1].isupper():
        words = ["trip", "to", *words]  # going to Japan in May
    return "_".join(words)


#: "my <word> is …" words that name an attribute the phrasing rules know by another name.
_ATTRIBUTE_ALIASES = {
    "job": "occupation", "work": "employer", "city": "location", "home": "location", "hometown": "hometown",
    "address": "location", "employer": "employer", "company": "employer", "girlfriend": "partner",
    "boyfriend": "partner", "wife": "partner", "husband": "partner", "partner": "partner",
}


def numbers_of(text: str) -> list[str]:
    """The numbers, dates, months and weekdays of ``text``, as written (number words as digits)."""
    return list(_numbers_in(text))


@lru_cache(maxsize=8192)
def _numbers_in(text: str) -> tuple[str, ...]:
    return tuple(_NUMBER_WORDS.get(m.group(0).casefold(), m.group(0).casefold()) for m in _NUMERIC.finditer(text))


@lru_cache(maxsize=8192)
def template_of(text: str) -> str:
    """``text`` with its numbers and dates masked, filler words and punctuation dropped: two
    sentences with one template and other numbers state one thing with a changed number."""
    low = normalize(text).casefold()
    low = re.sub(r"\bwe\b", "i", low).replace("we're", "i am")
    low = low.replace("i'm", "i am").replace("'ve", " have").replace("'re", " are").replace("n't", " not")
    masked = _NUMERIC.sub(" # ", _WEEKLY.sub(" ", low))
    words = [w for w in _WORD.findall(masked.replace("#", " numbermask ")) if w not in _FILLER_WORDS]
    return " ".join(words)


# What decide() asks of each text, once per text: a save's statement is compared with up to
# truth.CANDIDATES memories, and the memories recur from save to save (forget_texts clears these).
@lru_cache(maxsize=8192)
def _change_marker(text: str) -> str | None:
    """The first word of ``text`` saying that a fact changed (:data:`CHANGE_MARKERS`), as written."""
    found = CHANGE_MARKERS.search(text)
    return found.group(0) if found else None


@lru_cache(maxsize=8192)
def _negated(text: str) -> bool:
    return _NEGATION.search(text) is not None


@lru_cache(maxsize=8192)
def _at_a_moment(text: str) -> bool:
    return _MOMENT.search(text) is not None


@lru_cache(maxsize=8192)
def _all_words(text: str) -> frozenset[str]:
    """Every word of ``text``, stop words included, casefolded."""
    return frozenset(_WORD.findall(text.casefold()))


@lru_cache(maxsize=8192)
def _length_in_words(text: str) -> int:
    return len(text.split())


@lru_cache(maxsize=8192)
def _folded(text: str) -> str:
    return normalize(text).casefold()


@lru_cache(maxsize=8192)
def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(_folded(text)) if w not in _STOP)


@lru_cache(maxsize=8192)
def _readable(text: str) -> bool:
    """Whether the phrasing rules can read ``text`` at all: Latin script and none of the common
    function words of the other languages written in it."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    latin = sum(1 for c in letters if "LATIN" in unicodedata.name(c, ""))
    if latin / len(letters) < 0.9:
        return False
    return not any(w in _FOREIGN for w in _WORD.findall(text.casefold()))


#: A sentence telling of something done (past tense of doing verbs): with other numbers, another event.
_EVENT = re.compile(r"\b(?:visited|went|ran|bought|saw|met|read|watched|played|ate|made|did|took|won|lost|finished|"
                    r"completed|attended|walked|cycled|swam|drove|flew|wrote|cooked|baked|booked|sent|called|"
                    r"scored|climbed|hiked|painted|built|sold|paid|spent|travell?ed|stayed|tried)\b", re.IGNORECASE)
#: A number that names which one ("project 2", "room 101", "Heron2", "#4"), not how many: another one, not a change.
_NUMBERED = re.compile(r"\b(?:number|no\.|nr\.?|#|project|room|flat|apartment|item|version|v|step|chapter|"
                       r"season|episode|level|floor|gate|seat|table|line|bus|route|ticket)\s*\d|[A-Za-z]\d",
                       re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|my|me|we|our)\b", re.IGNORECASE)
#: Common function words of other languages in Latin script: a sentence with one is not read
#: by the (English) phrasing rules.
_FOREIGN = frozenset("""
ich du er sie wir ihr und ist nicht jetzt wohne arbeite bei mein meine der die das ein eine mit auch
je tu il elle nous vous et est suis pas maintenant j'habite habite travaille mon ma mes une avec chez
yo tú él ella nosotros vivo trabajo ahora mi mis con pero también ya estoy soy
eu tu ele ela nós moro trabalho agora meu minha não com também estou sou em
io lui lei noi vivo lavoro adesso ora mio mia non sono anche
ik jij hij zij wij woon werk nu mijn niet een het
jag vi bor jobbar mitt inte och är
""".split()) - {"em", "ma", "mi", "er", "du", "ya", "con", "ora", "min", "han", "hon", "non", "me", "a", "in", "so", "no", "on", "i", "he", "we", "us", "it", "is", "to", "of", "at", "or", "and"}


# ------------------------------------------------------------------------------------------
# deciding


def _same_value(a: str, b: str) -> bool:
    if a == b:
        return True
    x, y = set(a.split()), set(b.split())
    return bool(x) and bool(y) and (x <= y or y <= x)


_GENERIC_VALUE_WORDS = frozenset("trip visit go going travel move job plan plans new old".split())


def _overlapping(a: str, b: str) -> bool:
    """Whether two values share a word that names something (not "trip", "visit", …)."""
    return bool((content_words(a) & content_words(b)) - _GENERIC_VALUE_WORDS)


def _compare_facts(new: Fact, old: Fact, changed: bool = False) -> tuple[Verdict, str, float] | None:
    """The verdict of two facts on one subject (None: they do not bear on each other). Symmetric
    but for wording: which of the two is current is decided by time, not here. ``changed``: one of
    the two sentences marks a change ("now", "renamed", …)."""
    if new.subject != old.subject:
        return None
    for a, b in ((new, old), (old, new)):
        if a.attribute == "*" and a.replaces is not None:  # switched from X to Y
            if b.attribute == "*" and b.replaces is not None:
                return (Verdict.DUPLICATE, f"the same switch to '{a.value}'", 0.8) if (
                    _same_value(a.value, b.value) and _same_value(a.replaces, b.replaces)) else None
            if _same_value(a.replaces, b.value) and not b.negated:
                return Verdict.SUPERSEDES, f"switched from '{b.value}' to '{a.value}'", 0.9
            if _same_value(a.value, b.value):
                return (Verdict.SUPERSEDES, f"'{a.value}' then no longer", 0.8) if b.negated else (
                    Verdict.UNRELATED, f"'{a.value}' held, and a switch to it", 0.6)
            return None
    attr_new, attr_old = new.attribute, old.attribute
    same = _same_value(new.value, old.value)
    if attr_new != attr_old:
        # a negation that names the value held under another reading ("I left Google" read as a
        # job; "I lost Rex" as a pet of no kind): the value decides
        if new.negated != old.negated and same and attr_new.split(":")[0] == attr_old.split(":")[0] or (
                new.negated != old.negated and same and "*" not in (attr_new, attr_old)
                and {attr_new.split(":")[0], attr_old.split(":")[0]} <= _NEGATABLE_ACROSS):
            return Verdict.SUPERSEDES, f"'{old.value}' then no longer ({attr_old} / {attr_new})", 0.75
        return None
    attribute = attr_new.split(":")[0]
    if new.negated == old.negated:
        if same:
            return Verdict.DUPLICATE, f"same {attr_new}: '{new.value}'", 0.9
        if new.negated:  # no longer X / no longer Y: two things ended
            return None
        if attribute in MANY_VALUED:
            if attribute == "pet":  # a second pet of one kind, or the same pet renamed
                if changed:
                    return Verdict.SUPERSEDES, f"{attr_new} renamed from '{old.value}' to '{new.value}'", 0.7
                return Verdict.UNCERTAIN, f"another {attr_new} '{new.value}' beside '{old.value}'", 0.5
            return None
        if attribute not in SINGLE_VALUED and not changed:  # "my <anything> is …": changed, or both true?
            return Verdict.UNCERTAIN, f"{attr_new} '{old.value}', then '{new.value}' (no word of a change)", 0.5
        return Verdict.SUPERSEDES, f"{attr_new} changed from '{old.value}' to '{new.value}'", 0.9
    held, ended = (old, new) if new.negated else (new, old)
    if same:
        return Verdict.SUPERSEDES, f"{attr_new} '{held.value}', then no longer", 0.9
    if _overlapping(held.value, ended.value):
        return Verdict.SUPERSEDES, f"{attr_new} '{held.value}', then no longer (read as '{ended.value}')", 0.75
    return None


#: The words that name a relative or partner as a woman or a man: one fact said of each is not the same
_ROLES = {**dict.fromkeys(("girlfriend", "wife", "fiancee", "fiancée", "mom", "mother", "sister", "daughter",
                           "aunt", "grandma", "grandmother"), "f"),
          **dict.fromkeys(("boyfriend", "husband", "fiance", "fiancé", "dad", "father", "brother", "son", "uncle",
                           "grandpa", "grandfather"), "m")}
_ROLE = re.compile(r"\b(?:my|our)\s+(" + "|".join(sorted(_ROLES, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def _role_of(text: str) -> str | None:
    """Whether ``text`` names a woman or a man by their relation ("my wife", "my brother"); None:
    neither, or both."""
    found = {_ROLES[m.casefold()] for m in _ROLE.findall(text)}
    return found.pop() if len(found) == 1 else None


#: Attributes a negation may end across readings (the same value read as another attribute).
_NEGATABLE_ACROSS = frozenset({"pet", "likes", "medication", "employer", "partner", "plan", "diet", "allergy"})


_CLAUSES = re.compile(r"[.;!?]\s+|,?\s+and\s+(?=(?:I|i|my|we|our)?\s*[a-z]+\b)|\s+but\s+")


def _says_more(stale: str, current: str, fact: Fact) -> str | None:
    """A clause of the earlier statement that the changed fact is not in and the later one does not
    say ("… and work as a nurse"): superseding the whole memory would hide it from recall."""
    value = content_words(fact.value)
    for clause in _CLAUSES.split(stale):
        words = content_words(clause)
        if words and not (words & value) and words - content_words(current):
            return clause.strip()
    return None


def decide(new: Statement, candidate: Candidate, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Decision:
    """The verdict on one candidate (see the module's docstring)."""
    later = "candidate" if new.created_at >= candidate.created_at else "new"

    def out(verdict: Verdict, reason: str, confidence: float,
            facts: tuple[Fact | None, Fact | None] = (None, None)) -> Decision:
        gated = verdict in (Verdict.SUPERSEDES, Verdict.DUPLICATE) and candidate.similarity < thresholds.rule_gate
        if verdict is Verdict.SUPERSEDES and any(f is not None and f.subject in _PRONOUNS for f in facts):
            reason = f"{reason}; but 'he', 'she' or 'they' may be two people"
            verdict, confidence = Verdict.UNCERTAIN, 0.4
        elif gated:
            reason = f"{reason}; but the texts are far apart (similarity {candidate.similarity:.2f})"
            verdict, confidence = Verdict.UNCERTAIN, 0.4
        return Decision(verdict, reason, round(confidence, 2), candidate,
                        later if verdict is Verdict.SUPERSEDES else None, facts)

    if new.project != candidate.project:
        return Decision(Verdict.UNRELATED, "another project", 1.0, candidate)
    if (_at_a_moment(new.content) and _at_a_moment(candidate.content)
            and new.created_at.date() != candidate.created_at.date()):
        # "I ran 5 km today" on Monday and "I ran 8 km today" on Friday: two events, not a change
        return Decision(Verdict.UNRELATED, "events of different days", 0.8, candidate)
    a, b = _folded(new.content), _folded(candidate.content)
    if a == b:
        return Decision(Verdict.DUPLICATE, "the same text", 1.0, candidate)
    if max(len(a), len(b)) > RULES_READ_CHARS:
        # a document (the rules read statements): the same memory only as the same text. Merging two
        # long texts would keep both whole in one memory's sayings, and one event of it could outgrow
        # what the bus carries (two texts of 200,000 four-byte characters: 1.6 MB)
        return Decision(Verdict.UNRELATED, "texts this long are one memory only when they are the same text",
                        0.6, candidate)
    numbers_new, numbers_old = numbers_of(new.content), numbers_of(candidate.content)
    template_same = template_of(new.content) == template_of(candidate.content)
    if template_same and numbers_new != numbers_old:
        changed_word = any(_change_marker(t) for t in (new.content, candidate.content))
        same_moment = _at_a_moment(new.content) and _at_a_moment(candidate.content)  # (and day: above)
        if not changed_word and not same_moment and _EVENT.search(new.content):
            # "I visited museum number 1" / "… number 2": two events, not a changed number
            return Decision(Verdict.UNRELATED, f"two events: {numbers_old} / {numbers_new}", 0.6, candidate)
        if changed_word:
            return out(Verdict.SUPERSEDES, f"a changed number or date: {numbers_old} → {numbers_new}", 0.85)
        if any(_FIRST_PERSON.search(t) for t in (new.content, candidate.content)) and not _NUMBERED.search(
                new.content):
            return out(Verdict.SUPERSEDES, f"a changed number or date: {numbers_old} → {numbers_new}", 0.8)
        # "Room 101, code 4711" / "Room 102, code 4812": a change, or two things? nobody says
        return out(Verdict.UNCERTAIN, f"other numbers {numbers_old} → {numbers_new} in a sentence about no one", 0.4)
    if template_same:
        return out(Verdict.DUPLICATE, "the same sentence but for filler words", 0.95)
    if new.memory_key and new.memory_key == candidate.memory_key:
        if content_words(new.content) == content_words(candidate.content) and numbers_new == numbers_old:
            return out(Verdict.DUPLICATE, f"same key {new.memory_key}, same content words", 0.9)
        return out(Verdict.SUPERSEDES, f"same key {new.memory_key}, another content", 0.95)
    facts_new, facts_old = read_facts(new.content), read_facts(candidate.content)
    changed = bool(_change_marker(new.content) or _change_marker(candidate.content))
    verdicts: list[tuple[Verdict, str, float, Fact, Fact]] = []
    for fn in facts_new:
        for fo in facts_old:
            found = _compare_facts(fn, fo, changed)
            if found is not None:
                verdicts.append((*found, fn, fo))
    if verdicts:
        order = (Verdict.SUPERSEDES, Verdict.UNCERTAIN, Verdict.DUPLICATE, Verdict.UNRELATED)
        verdicts.sort(key=lambda v: order.index(v[0]))
        verdict, reason, confidence, fn, fo = verdicts[0]
        words_new, words_old = content_words(new.content), content_words(candidate.content)
        overlap = len(words_new & words_old) / max(len(words_new), len(words_old), 1)
        # a plan of one word ("want to visit") or a fact about "they" says too little to call two
        # sentences the same fact: their words must agree as well (LoCoMo's extracted facts)
        weak = fn.subject in _PRONOUNS or (fn.attribute == "plan" and len(min(fn.value, fo.value).split()) == 1)
        if verdict is Verdict.DUPLICATE and (len(facts_new) != len(facts_old) or (
                overlap < FACT_SHARED_WORDS and (weak or candidate.similarity < thresholds.fact_duplicate))):
            # one of them says more: not the same memory, nor a change
            return out(Verdict.UNRELATED, f"{reason}, but one says more", 0.6, (fn, fo))
        if verdict is Verdict.DUPLICATE and numbers_new != numbers_old:
            return out(Verdict.UNCERTAIN, f"{reason}, but other numbers {numbers_old} → {numbers_new}", 0.5, (fn, fo))
        if verdict is Verdict.SUPERSEDES:
            stale, current, fact = ((candidate.content, new.content, fo) if later == "candidate"
                                    else (new.content, candidate.content, fn))
            more = _says_more(stale, current, fact)
            if more:
                return out(Verdict.UNCERTAIN, f"{reason}, but the earlier one says more: {more}", 0.5, (fn, fo))
        roles = (_role_of(new.content), _role_of(candidate.content))
        if verdict is Verdict.DUPLICATE and None not in roles and roles[0] != roles[1]:
            # "my girlfriend's name is Sam" / "my boyfriend's name is Sam": two people, or a correction
            return out(Verdict.UNCERTAIN, f"{reason}, but '{roles[1]}' / '{roles[0]}'", 0.5, (fn, fo))
        return out(verdict, reason, confidence, (fn, fo))
    for facts, other in ((facts_new, candidate.content), (facts_old, new.content)):
        other_facts = facts_old if facts is facts_new else facts_new
        for fact in facts:  # switched from X / no longer X, and the other says X in words no rule read
            ended = fact.replaces if fact.replaces else (fact.value if fact.negated else None)
            if (ended and fact.subject == "user" and not other_facts and _FIRST_PERSON.search(other)
                    and not _NEGATION.search(other) and len(other.split()) <= SHORT_STATEMENT_WORDS
                    and content_words(ended) and content_words(ended) <= content_words(other)):
                what = (f"switched from '{ended}' to '{fact.value}'" if fact.replaces
                        else f"no longer {fact.attribute} '{ended}'")
                pair = (fact, None) if facts is facts_new else (None, fact)
                return out(Verdict.SUPERSEDES, f"{what}, which the other says", 0.7, pair)
    if facts_new and facts_old:
        subjects_new = {f.subject for f in facts_new}
        subjects_old = {f.subject for f in facts_old}
        if not subjects_new & subjects_old:
            return Decision(Verdict.UNRELATED, f"other subjects: {sorted(subjects_new)} / {sorted(subjects_old)}",
                            0.9, candidate, None, (facts_new[0], facts_old[0]))
        return Decision(Verdict.UNRELATED, "other attributes or other items", 0.8, candidate, None,
                        (facts_new[0], facts_old[0]))
    return _by_similarity(new, candidate, thresholds, facts_new, facts_old, numbers_new, numbers_old)


def _by_similarity(
    new: Statement, candidate: Candidate, thresholds: Thresholds, facts_new: tuple[Fact, ...], facts_old: tuple[Fact, ...],
    numbers_new: list[str], numbers_old: list[str],
) -> Decision:
    """No pair of facts to compare: the embedding similarity and the words decide, and what they
    cannot settle is flagged (UNCERTAIN), never resolved."""
    sim = candidate.similarity
    readable = _readable(new.content) and _readable(candidate.content)
    words_new, words_old = content_words(new.content), content_words(candidate.content)
    overlap = len(words_new & words_old) / max(len(words_new), len(words_old), 1)
    negation_differs = _negated(new.content) != _negated(candidate.content)
    apart = len(words_new ^ words_old)
    turned = _TURNING_WORDS & (_all_words(new.content) ^ _all_words(candidate.content))
    if (sim >= thresholds.duplicate and overlap >= SAME_WORDS and apart <= MAX_WORDS_APART
            and numbers_new == numbers_old and not turned
            and not negation_differs and readable and not (facts_new or facts_old)):
        return Decision(Verdict.DUPLICATE, f"the same words and meaning (similarity {sim:.2f})", round(sim * 0.9, 2),
                        candidate)
    if _length_in_words(new.content) > FLAG_MAX_WORDS or _length_in_words(candidate.content) > FLAG_MAX_WORDS:
        return Decision(Verdict.UNRELATED, f"no fact the rules can read in texts this long (similarity {sim:.2f})",
                        0.5, candidate)
    if not readable:
        shared = len(words_new & words_old) / max(min(len(words_new), len(words_old)), 1)
        if sim >= thresholds.uncertain or shared >= FOREIGN_SHARED_WORDS:
            return Decision(Verdict.UNCERTAIN, f"close (similarity {sim:.2f}, {shared:.0%} of the words shared) in "
                            "words the rules cannot read", 0.5, candidate)
    elif sim >= thresholds.uncertain:
        marks = _change_marker(new.content), _change_marker(candidate.content)
        marker = marks[0] or marks[1]
        if marks[0] and marks[1] and marks[0].casefold() == marks[1].casefold():
            marker = None  # both say "quit": that word changes nothing between them
        if overlap < FLAG_SHARED_WORDS:
            marker = None  # a change word in texts that share few words: about something else
        negation_differs = negation_differs and overlap >= SAME_WORDS  # the same words, one of them negated
        if marker or negation_differs or sim >= thresholds.duplicate:
            why = f"'{marker}'" if marker else ("a negation" if negation_differs else "nearly the same")
            return Decision(Verdict.UNCERTAIN, f"close in meaning (similarity {sim:.2f}) and {why}, but no "
                            "attribute the rules can compare", 0.5, candidate)
    return Decision(Verdict.UNRELATED, f"nothing in common the rules can read (similarity {sim:.2f})", 0.6,
                    candidate)


def forget_texts() -> None:
    """Drop the texts the rules' caches hold (a purge: they are keyed by text, not by user, so all
    of them; they are refilled as memories are judged again)."""
    for cached in (template_of, _facts_in, _numbers_in, content_words, _readable, _change_marker, _negated,
                   _at_a_moment, _all_words, _length_in_words, _folded):
        cached.cache_clear()


def decide_all(
    new: Statement, candidates: Sequence[Candidate], thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Decision]:
    """:func:`decide` for every candidate, most similar first."""
    return [decide(new, c, thresholds) for c in sorted(candidates, key=lambda c: -c.similarity)]

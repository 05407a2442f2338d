"""Who "my sister" is: the names a user's memories give the people and animals around them
(offline rules).

"My sister Ana is visiting next week", then "What does my sister like to eat?" against "Ana loves
sushi": the question shares no word with the memory that answers it. A memory that names someone by
their relation to the speaker gives an **alias**: the relation ("sister") stands for the name
("Ana"). The patterns, in English (the relation words are listed, :data:`RELATIONS`):

* ``my [little|older|best|new …] <relation>[,] [called|named] <Name>``: "my sister Ana", "my dog,
  Biscuit", "my dog named Biscuit";
* ``<Name>[,] [is] my <relation>``: "Ana, my sister", "Ana is my sister";
* ``my <relation>'s name is <Name>``, ``my <relation> is called|named <Name>``;
* ``<I|we|the user|Name> have|has|got|adopted … a [little …] <relation>[,] [called|named] <Name>``:
  "I have a sister named Ana", "we adopted a dog called Biscuit", "the user has a brother, Tom";
* the same followed, in the same memory, by ``her|his|its name is <Name>``, ``she|he|it is
  called|named <Name>`` or ``we named her|him|it <Name>``: "I have a sister. Her name is Ana."

"my" and "our" (and "I" and "we" who have one) are the speaker's: the user for a memory without a label, the person a conversation turn is
labelled with (``"Caroline: my husband Tom …"``: Caroline's husband); "the user's <relation>"
(how the extractor writes) is the user's too, and "Caroline's <relation>" is Caroline's. An alias is
kept under a key, :func:`alias_key` ``(whose, relation)``, and a question's own relations are read
the same way (:func:`asked_relations`): "my sister" (the user's), "Caroline's husband".

Pure functions: the memory service stores each memory's keys with its row (an index of which
memories name whom, rebuilt by a replay like the rest of the row), and reads the names again from
those memories' words when a question asks for one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["RELATIONS", "Alias", "AskedRelation", "alias_key", "alias_keys", "aliases_in", "asked_relations",
           "with_name"]

#: Relation words, each with the key it is kept under (synonyms share one).
RELATIONS: dict[str, str] = {
    **{w: w for w in (
        "sister brother sibling wife husband partner spouse girlfriend boyfriend son daughter kid child baby "
        "grandmother grandfather grandma grandpa aunt uncle cousin niece nephew stepmother stepfather stepson "
        "stepdaughter friend roommate flatmate housemate boss manager colleague teammate mentor coach therapist "
        "doctor dentist teacher landlord landlady neighbour dog cat pet horse rabbit parrot "
        "bird hamster turtle tortoise snake fish").split()},
    "puppy": "dog", "pup": "dog", "kitten": "cat", "kitty": "cat", "bunny": "rabbit",
    "mom": "mother", "mum": "mother", "mother": "mother", "mommy": "mother", "mama": "mother",
    "dad": "father", "father": "father", "daddy": "father", "papa": "father",
    "fiance": "fiance", "fiancee": "fiance", "fiancé": "fiance", "fiancée": "fiance",
    "coworker": "colleague", "co-worker": "colleague", "neighbor": "neighbour",
    "mother-in-law": "mother-in-law", "father-in-law": "father-in-law", "sister-in-law": "sister-in-law",
    "brother-in-law": "brother-in-law", "granny": "grandmother", "grandad": "grandfather",
}
_ADJECTIVES = ("little|older|younger|big|baby|elder|eldest|oldest|youngest|best|new|old|twin|dear|lovely|"
               "sweet|late|ex")
_REL = "|".join(sorted((re.escape(w) for w in RELATIONS), key=len, reverse=True))
_NAME_WORD = r"[A-Z][a-zà-ÿ]+(?:-[A-Za-zà-ÿ]+)?"
_NAME = rf"(?P<name>{_NAME_WORD}(?:\s{_NAME_WORD})?)"
_OWNER = rf"(?P<owner>(?i:my|our|the user['’]s|user['’]s)|{_NAME_WORD}['’]s)"
_ADJ = rf"(?:(?i:{_ADJECTIVES})\s+)?"
_RELATION = rf"(?P<rel>(?i:{_REL}))"
#: who has one: "I", "we", "the user" (the extractor's words), or a person by name
_HOLDER = rf"(?P<holder>(?i:I|we|the user|user)|{_NAME_WORD})"
_HAS = (r"(?i:have|has|had|got|get|adopted|adopt|rescued|welcomed|hired|bought|brought home)(?:\s+(?i:got))?"
        r"(?:\s+(?i:just|finally|recently))?")
_A_RELATION = rf"\b{_HOLDER}\s+(?:(?i:just|finally|recently|also)\s+)?{_HAS}\s+(?i:a|an|another)\s+{_ADJ}{_RELATION}"
_PATTERNS = (
    re.compile(rf"\b{_OWNER}\s+{_ADJ}{_RELATION}(?:['’]s\s+name\s+is|\s+is\s+(?i:called|named))\s+{_NAME}"),
    # (not "my girlfriend, Toby and I": a list)
    re.compile(rf"\b{_OWNER}\s+{_ADJ}{_RELATION}\s*,?\s+(?:(?i:called|named)\s+)?{_NAME}\b(?!\s+and\s+(?:I|me)\b)"),
    # (not "Max is my mother's cat": the relation's own)
    re.compile(rf"\b{_NAME}(?:\s*,\s*|\s+is\s+|\s*\(\s*){_OWNER}\s+{_ADJ}{_RELATION}\b(?!['’]s)"),
    # "I have a sister named Ana", "we adopted a dog, Biscuit" (not "a dog, and …": a name is capitalised)
    re.compile(rf"{_A_RELATION}\s*(?:,\s*|\s+(?i:called|named)\s+){_NAME}\b(?!\s+and\s+(?:I|me)\b)"),
    # "I have a sister. Her name is Ana." / "… a puppy; we named him Rex" (within one sentence more)
    re.compile(rf"{_A_RELATION}\b[^.!?;]{{0,80}}[.!?;,]?\s+(?:(?i:her|his|its|their)\s+name\s+is|"
               rf"(?i:she|he|it)(?:\s+is|['’]s)\s+(?i:called|named)|(?i:we|I)\s+(?i:named|called)\s+(?i:her|him|it))"
               rf"\s+{_NAME}"),
)
_ASKED = re.compile(rf"\b{_OWNER}\s+{_ADJ}{_RELATION}(?P<possessive>['’]s)?\b")
_LABEL = re.compile(r"^\s*([^:\n]{1,40}):\s")
#: Capitalised words that are not names (sentence openers, days, months, pronouns).
_NOT_NAMES = frozenset("""
    i i'm i've i'll i'd we you he she they it this that there then so and but or oh well also yes no
    yesterday today tonight tomorrow last next this monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    what when where which who why how is are was were do does did can could would will should has have had
    the a an my our your his her their its just still always never sometimes
    yeah yep yup nope ok okay sure right wow hey hi hello thanks thank sorry please congrats oops lol haha
    ah aw oh ooh thankfully luckily unfortunately fortunately honestly actually anyway anyways sadly
    hopefully recently finally basically seriously obviously apparently meanwhile besides plus
""".split())


@dataclass(frozen=True, slots=True)
class Alias:
    """``name`` is ``whose`` ``relation`` (``whose``: "" for the user, else a person's name, case-folded)."""

    whose: str
    relation: str
    name: str


@dataclass(frozen=True, slots=True)
class AskedRelation:
    """A relation a question names: its words in the question (``phrase``: "my sister's"), whose it
    is and which relation (:func:`alias_key`), and whether it is possessive."""

    phrase: str
    whose: str
    relation: str
    possessive: bool


def alias_key(whose: str, relation: str) -> str:
    """The key an alias is kept under: ``"<whose>|<relation>"`` (``"|sister"``: the user's sister)."""
    return f"{whose}|{relation}"


def _whose(owner: str, speaker: str) -> str:
    o = owner.casefold()
    if o in ("my", "our", "i", "we"):
        return speaker
    if o in ("the user", "user") or o.endswith(("user's", "user’s")):
        return ""
    return o[:-2] if o.endswith(("'s", "’s")) else o  # "caroline's" → "caroline"; a holder's name as it is


def _speaker(content: str) -> tuple[str, str]:
    """(whose "my" is, the words after a leading label): the label's person for a labelled turn."""
    label = _LABEL.match(content)
    if label is None:
        return "", content
    return label.group(1).strip().casefold(), content[label.end():]


def aliases_in(content: str) -> list[Alias]:
    """The aliases ``content`` states, in order, once each."""
    speaker, body = _speaker(content)
    found: dict[Alias, None] = {}
    for pattern in _PATTERNS:
        for m in pattern.finditer(body):
            name = m.group("name")
            if name.split()[0].casefold() in _NOT_NAMES or name.split()[0].casefold() in RELATIONS:
                continue
            if len(name.split()) > 1 and name.split()[1].casefold() in _NOT_NAMES:
                name = name.split()[0]
            owner = m.groupdict().get("owner") or m.group("holder")
            if owner.casefold() in _NOT_NAMES - {"i", "we", "my", "our"}:  # ("Yesterday got a dog …": no holder)
                continue
            relation = RELATIONS[m.group("rel").casefold()]
            found.setdefault(Alias(_whose(owner, speaker), relation, name), None)
    return list(found)


def alias_keys(content: str) -> list[str]:
    """The keys of the aliases ``content`` states (what the memory's row is indexed under)."""
    return sorted({alias_key(a.whose, a.relation) for a in aliases_in(content)})


def asked_relations(question: str) -> list[AskedRelation]:
    """The relations a question names ("my sister", "the user's dog", "Caroline's husband's"), in order."""
    asked: dict[tuple[str, str], AskedRelation] = {}
    for m in _ASKED.finditer(question):
        owner = m.group("owner")
        if owner.casefold()[:-2] in _NOT_NAMES:  # ("What's my …": not an owner)
            continue
        whose = _whose(owner, "")
        relation = RELATIONS[m.group("rel").casefold()]
        asked.setdefault((whose, relation), AskedRelation(m.group(0), whose, relation, bool(m.group("possessive"))))
    return list(asked.values())


def with_name(question: str, asked: AskedRelation, name: str) -> str:
    """``question`` with the relation's words replaced by ``name`` ("What does my sister like?" →
    "What does Ana like?"; "my sister's job" → "Ana's job")."""
    return question.replace(asked.phrase, f"{name}’s" if asked.possessive else name, 1)

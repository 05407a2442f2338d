"""Who "my sister" is (services/memory/domain/aliases.py): the aliases a memory's words state, the
relations a question names, and the question asked with a name."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from contracts.memory import MemoryStatus, MemoryView, Recall, RecallHit, RecallResult
from services.memory.domain.aliases import Alias, alias_keys, aliases_in, asked_relations, with_name
from services.memory.search.hops import alias_fusion, alias_recalls

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("content", "expected"), [
    ("My sister Ana is visiting next week", [Alias("", "sister", "Ana")]),
    ("my dog, Biscuit, loves the beach", [Alias("", "dog", "Biscuit")]),
    ("Ana, my little sister, is a nurse", [Alias("", "sister", "Ana")]),
    ("Ana is my sister", [Alias("", "sister", "Ana")]),
    ("My sister's name is Ana Silva", [Alias("", "sister", "Ana Silva")]),
    ("my dog is called Biscuit", [Alias("", "dog", "Biscuit")]),
    ("I walked my dog Biscuit on Monday", [Alias("", "dog", "Biscuit")]),
    ("my sister Ana's birthday is in May", [Alias("", "sister", "Ana")]),
    ("My mum Rosa and my dad Jorge came over", [Alias("", "mother", "Rosa"), Alias("", "father", "Jorge")]),
    ("Mary-Jane is my cousin", [Alias("", "cousin", "Mary-Jane")]),
    # whose: the user for "the user's" (the extractor's words), the label's person for a turn
    ("The user's sister Ana lives in Porto", [Alias("", "sister", "Ana")]),
    ("Caroline: my husband Tom got a new job", [Alias("caroline", "husband", "Tom")]),
    ("Melanie's husband Tom likes hiking", [Alias("melanie", "husband", "Tom")]),
    # no name: openers, days and pronouns are not names; a relation without one gives nothing
    ("Yesterday, my sister called", []),
    ("I met my friend at the gym on Friday", []),
    ("my sister Yesterday said hi", []),
    ("My sister is a nurse", []),
    # found on LoCoMo's turns: an opener, a list, the relation's own
    ("Melanie: Thankfully, my son's ok", []),
    ("Deborah: Yeah, my mom really loved flowers", []),
    ("Andrew: My girlfriend, Toby and I are going camping", []),
    ("Deborah: Max is my mother's cat", []),
    ("Andrew: meet Toby, my puppy", [Alias("andrew", "dog", "Toby")]),
    # one who has one: "I have a sister named Ana", "we adopted a dog called Biscuit", the extractor's
    # "The user has …", a person's "Caroline has …"; "our"; a name then "(my sister)"
    ("I have a sister named Ana", [Alias("", "sister", "Ana")]),
    ("I have a little brother, Tom.", [Alias("", "brother", "Tom")]),
    ("We adopted a dog called Biscuit", [Alias("", "dog", "Biscuit")]),
    ("I just got a new puppy named Rex", [Alias("", "dog", "Rex")]),
    ("The user has a sister named Ana who lives in Porto", [Alias("", "sister", "Ana")]),
    ("User has a dog called Biscuit", [Alias("", "dog", "Biscuit")]),
    ("Caroline has a husband named Tom", [Alias("caroline", "husband", "Tom")]),
    ("Our dog Biscuit loves the beach", [Alias("", "dog", "Biscuit")]),
    ("our cat is called Luna", [Alias("", "cat", "Luna")]),
    ("Ana (my sister) is visiting", [Alias("", "sister", "Ana")]),
    # … and the name in the next words: "Her name is Ana", "we named him Oscar"
    ("I have a sister. Her name is Ana.", [Alias("", "sister", "Ana")]),
    ("We got a kitten last week; her name is Mochi", [Alias("", "cat", "Mochi")]),
    ("Audrey: We adopted another puppy! We named him Oscar.", [Alias("audrey", "dog", "Oscar")]),
    # found on LoCoMo's turns (all 7 of its 5,882 turns with an alias are right)
    ("Melanie: they're good- we got another cat named Bailey too", [Alias("melanie", "cat", "Bailey")]),
    # not a name: "and", a relation word, no holder, a list
    ("I have a dog, and I love him", []),
    ("I have a sister, Mom says she is lovely", []),
    ("Yesterday got a dog named Rex", []),
    ("I have a friend, John and I went hiking", []),
    ("I have a sister. She is a nurse in Porto.", []),
])
def test_the_aliases_a_memory_states(content: str, expected: list[Alias]) -> None:
    assert aliases_in(content) == expected


def test_a_memorys_keys_are_whose_and_which_relation() -> None:
    assert alias_keys("My sister Ana and my sister Eva came; Ana is my sister") == ["|sister"]
    assert alias_keys("Caroline: my dog Max and my husband Tom") == ["caroline|dog", "caroline|husband"]
    assert alias_keys("I like tea") == []


@pytest.mark.parametrize(("question", "keys", "asked_with_ana"), [
    ("What does my sister like to eat?", [("", "sister")], ["What does Ana like to eat?"]),
    ("What is my sister's job?", [("", "sister")], ["What is Ana’s job?"]),
    ("Where does my older brother live?", [("", "brother")], ["Where does Ana live?"]),
    ("Where does Caroline's husband work?", [("caroline", "husband")], ["Where does Ana work?"]),
    ("What did the user's boss say about the deadline?", [("", "boss")], ["What did Ana say about the deadline?"]),
    ("What's my mom's favourite flower?", [("", "mother")], ["What's Ana’s favourite flower?"]),
    ("What does our puppy like to eat?", [("", "dog")], ["What does Ana like to eat?"]),
    ("What's up with the deadline?", [], []),
    ("Where did I go hiking?", [], []),
])
def test_the_relations_a_question_names_and_the_question_with_a_name(
    question: str, keys: list[tuple[str, str]], asked_with_ana: list[str],
) -> None:
    asked = asked_relations(question)
    assert [(a.whose, a.relation) for a in asked] == keys
    assert [with_name(question, a, "Ana") for a in asked] == asked_with_ana


def _hit(content: str) -> RecallHit:
    now = datetime(2026, 12, 6, tzinfo=UTC)
    return RecallHit(memory=MemoryView(id=uuid.uuid5(uuid.NAMESPACE_URL, content), tenant="u", project="default",
                                       content=content, importance=3, confidence=1.0, source="test", version=1,
                                       status=MemoryStatus.ACTIVE, created_at=now, updated_at=now), score=1.0)


async def test_the_named_question_leads_the_fusion_and_the_question_as_asked_adds_the_rest() -> None:
    """The question alone ranks Ana's food fifth; asked with her name, first: fused, it is first, and
    what only the question as asked found stays in the list. Without a name, nothing changes."""
    asked = [_hit(c) for c in ("I like to eat oatmeal", "My brother eats pizza", "My sister Ana visits",
                               "I cook pasta", "Ana loves sushi", "My sister and I ate ice cream")]
    named = RecallResult(hits=[_hit(c) for c in ("Ana loves sushi", "I like to eat oatmeal", "My sister Ana visits")])
    fused = [h.memory.content for h in alias_fusion(asked, [named])]
    assert fused[:3] == ["Ana loves sushi", "I like to eat oatmeal", "My sister Ana visits"], fused
    assert sorted(fused) == sorted(h.memory.content for h in asked)
    assert alias_fusion(asked, []) == asked

    looked_up: list[list[str]] = []

    async def sources(keys: list[str]) -> list[str]:
        looked_up.append(keys)
        return ["My sister Ana visits next week", "Caroline: my sister Eva is a chef"]  # Eva is Caroline's

    async def recall(q: Recall) -> RecallResult:
        return RecallResult(hits=[_hit(q.query)])

    results = await alias_recalls(Recall(query="What does my sister like to eat?"), sources, recall, 10)
    assert looked_up == [["|sister"]]
    assert [r.hits[0].memory.content for r in results] == ["What does Ana like to eat?"]
    assert await alias_recalls(Recall(query="What do I like to eat?"), sources, recall, 10) == []
    assert looked_up == [["|sister"]]  # no relation named: nothing read

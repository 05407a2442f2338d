"""Writes ``bench/data/fact_changes.jsonl``: fact-change sequences, exact-meaning repeat groups and
hard negatives for the rules that keep memories true (``services/memory/domain/supersession.py``).

Written for Engram by hand, not taken from a public data set: the sentence templates and value
lists below are ours, and the file is drawn from them deterministically (``random.Random(SEED)``),
so running this again writes the very same file. Run: ``.venv/bin/python bench/fact_changes_gen.py``.

Each line is one record, ``kind``:

- ``change`` — one fact changing: ``old`` (one or more statements, each ``{"text", "at"}``), ``new``
  (the statement of the change), ``variants`` (other phrasings of the change, each with its own
  ``at``), ``query`` (what a user would ask), ``current`` and ``stale`` (the expected values);
- ``repeat`` — ``statements``: one fact said several times in other words or with filler (they
  must merge), ``value``;
- ``negative`` — ``a`` and ``b``: two similar but distinct facts that must neither merge nor
  supersede (``why`` says how they differ).

Every record has ``category`` (places, jobs, relationships, preferences, numbers, plans, pets,
health) and ``id``; ``split`` is ``fit`` for even ids and ``report`` for odd ids: thresholds are
fitted on ``fit`` only and the figures reported on ``report``.

Some phrasings are deliberately outside what the phrasing rules read ("Berlin is home now",
"I turned 31"): the data measures the rules, it is not written to suit them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 20261204
OUT = Path(__file__).parent / "data" / "fact_changes.jsonl"
START = datetime(2024, 1, 8, 9, 0)

CITIES = ["Lisbon", "Berlin", "Porto", "Madrid", "Paris", "London", "Dublin", "Amsterdam", "Vienna", "Prague",
          "Warsaw", "Oslo", "Stockholm", "Copenhagen", "Helsinki", "Rome", "Milan", "Barcelona", "Seattle",
          "Austin", "Denver", "Boston", "Chicago", "Toronto", "Montreal", "Vancouver", "Sydney", "Melbourne",
          "Tokyo", "Osaka", "Seoul", "Singapore", "Nairobi", "Cape Town", "Lima", "Bogota", "Mexico City"]
COMPANIES = ["Google", "Microsoft", "Spotify", "Siemens", "Shopify", "Stripe", "Airbus", "Philips", "Zalando",
             "Bosch", "Canva", "Atlassian", "Deloitte", "Accenture", "IKEA", "Nokia", "Ericsson", "Unilever",
             "Novartis", "Adidas", "SAP", "Booking.com", "Revolut", "Monzo", "Datadog", "GitLab", "Red Hat"]
ROLES = ["teacher", "nurse", "software engineer", "designer", "data scientist", "product manager", "accountant",
         "lawyer", "chef", "architect", "journalist", "pharmacist", "electrician", "photographer", "researcher",
         "consultant", "translator", "barista", "librarian", "paramedic"]
PEOPLE = ["Sam", "Alex", "Maya", "Leo", "Nina", "Omar", "Priya", "Tom", "Julia", "Marco", "Ines", "Hugo",
          "Sofia", "Daniel", "Chloe", "Ravi", "Emma", "Lucas", "Zoe", "Felix"]
RELATIVES = ["sister", "brother", "mom", "dad", "best friend", "cousin", "roommate", "boss"]
PET_NAMES = ["Rex", "Luna", "Milo", "Bella", "Oscar", "Nala", "Max", "Coco", "Simba", "Pepper", "Biscuit", "Ziggy"]
PETS = ["dog", "cat", "rabbit", "parrot", "hamster"]
FAVOURITES = {
    "color": ["blue", "green", "red", "purple", "yellow", "orange", "black"],
    "band": ["Radiohead", "Coldplay", "Arctic Monkeys", "Daft Punk", "Queen", "ABBA", "Muse"],
    "food": ["sushi", "pizza", "ramen", "tacos", "paella", "lasagna", "curry"],
    "book": ["Dune", "Emma", "Middlemarch", "The Hobbit", "Beloved", "Ulysses"],
    "sport": ["tennis", "football", "basketball", "climbing", "swimming", "cycling"],
    "movie": ["Alien", "Amelie", "Inception", "Heat", "Arrival", "Up"],
}
FOODS = ["coffee", "chocolate", "spicy food", "cheese", "red wine", "mushrooms", "olives", "seafood", "beer",
         "pineapple on pizza", "horror movies", "jazz", "running", "board games"]
DRINKS = [("coffee", "tea"), ("tea", "coffee"), ("beer", "wine"), ("soda", "sparkling water"),
          ("cow milk", "oat milk"), ("espresso", "matcha")]
DIETS = ["vegetarian", "vegan", "pescatarian"]
ALLERGENS = ["peanuts", "shellfish", "cats", "pollen", "penicillin", "gluten", "dust mites", "latex"]
MEDS = ["ibuprofen", "metformin", "sertraline", "vitamin D", "an inhaler", "antihistamines", "melatonin"]
CONDITIONS = ["asthma", "anemia", "a herniated disc", "insomnia", "high blood pressure", "migraines"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
PLACES_TO_VISIT = ["Japan", "Peru", "Iceland", "Morocco", "Vietnam", "Norway", "Chile", "Kenya", "Portugal",
                   "Canada", "New Zealand", "Greece"]
LANGUAGES = ["Spanish", "German", "Japanese", "French", "Italian", "Korean", "Mandarin", "Portuguese"]


class Gen:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.records: list[dict[str, Any]] = []

    def pick(self, items: list[Any], k: int = 1) -> Any:
        return self.rng.sample(items, k) if k > 1 else self.rng.choice(items)

    def moment(self) -> datetime:
        return START + timedelta(days=self.rng.randint(0, 300), hours=self.rng.randint(0, 10),
                                 minutes=self.rng.randint(0, 59))

    def add(self, record: dict[str, Any]) -> None:
        rid = len(self.records)
        self.records.append({"id": rid, "split": "fit" if rid % 2 == 0 else "report", **record})

    def change(self, category: str, olds: list[str], news: list[str], query: str, current: str, stale: str,
               subject: str = "user", attribute: str = "") -> None:
        t0 = self.moment()
        old = [{"text": t, "at": (t0 + timedelta(days=3 * i)).isoformat()} for i, t in enumerate(olds)]
        t1 = t0 + timedelta(days=self.rng.randint(20, 400))
        texts = list(dict.fromkeys(news))
        self.rng.shuffle(texts)
        new = {"text": texts[0], "at": t1.isoformat()}
        variants = [{"text": t, "at": (t1 + timedelta(hours=i + 1)).isoformat()} for i, t in enumerate(texts[1:])]
        self.add({"kind": "change", "category": category, "subject": subject, "attribute": attribute, "old": old,
                  "new": new, "variants": variants, "query": query, "current": current, "stale": stale})

    def repeat(self, category: str, statements: list[str], value: str) -> None:
        t0 = self.moment()
        said = [{"text": s, "at": (t0 + timedelta(days=5 * i)).isoformat()} for i, s in enumerate(statements)]
        self.add({"kind": "repeat", "category": category, "statements": said, "value": value})

    def negative(self, category: str, a: str, b: str, why: str) -> None:
        t0 = self.moment()
        self.add({"kind": "negative", "category": category, "a": {"text": a, "at": t0.isoformat()},
                  "b": {"text": b, "at": (t0 + timedelta(days=self.rng.randint(1, 90))).isoformat()}, "why": why})


def places(g: Gen) -> None:
    for _ in range(45):
        a, b = g.pick(CITIES, 2)
        n = g.rng.randint(2, 9)
        olds = g.rng.sample([f"I live in {a}", f"I've been living in {a} for {n} years", f"I'm based in {a}",
                             f"I live in {a} with my partner"], g.rng.randint(1, 2))
        news = g.rng.sample([f"I moved to {b} last month", f"I just relocated to {b}", f"I live in {b} now",
                             f"I'm now living in {b}", f"{b} is home now", f"I've moved to {b} for good",
                             f"We finally moved to {b}", f"I'm based in {b} these days"], 3)
        g.change("places", olds, news, "where does the user live", b.lower(), a.lower(), attribute="location")
    for _ in range(20):
        a, b = g.pick(CITIES, 2)
        rel = g.pick(RELATIVES[:6])
        g.change("places", [f"My {rel} lives in {a}"],
                 g.rng.sample([f"My {rel} moved to {b}", f"My {rel} lives in {b} now",
                               f"My {rel} relocated to {b} in {g.pick(MONTHS)}"], 2),
                 f"where does the user's {rel} live", b.lower(), a.lower(), subject=rel, attribute="location")


def jobs(g: Gen) -> None:
    for _ in range(30):
        a, b = g.pick(COMPANIES, 2)
        olds = g.rng.sample([f"I work at {a}", f"I'm working for {a}", f"I work for {a} as an engineer"], 1)
        news = g.rng.sample([f"I started a new job at {b}", f"I work at {b} now", f"I joined {b} in {g.pick(MONTHS)}",
                             f"I left {a} and now work for {b}", f"I got a job at {b}", f"My new employer is {b}",
                             f"Today was my first day at {b}"], 3)
        g.change("jobs", olds, news, "where does the user work", b.lower(), a.lower(), attribute="employer")
    for _ in range(25):
        a, b = g.pick(ROLES, 2)
        art_a = "an" if a[0] in "aeiou" else "a"
        art_b = "an" if b[0] in "aeiou" else "a"
        olds = [g.pick([f"I work as {art_a} {a}", f"I'm {art_a} {a}", f"My job is {a}"])]
        news = g.rng.sample([f"I became {art_b} {b}", f"I'm {art_b} {b} now", f"I retrained as {art_b} {b}",
                             f"I work as {art_b} {b} these days", f"I switched careers and I'm {art_b} {b}",
                             f"My new role is {b}"], 3)
        g.change("jobs", olds, news, "what is the user's job", b, a, attribute="occupation")


def relationships(g: Gen) -> None:
    statuses = [("single", [" got engaged", "'m engaged now", " got married last spring", "'m married now"], "engaged"),
                ("married", [" got divorced", "'m divorced now", "'m single again"], "divorced"),
                ("engaged", [" got married", "'m married now"], "married")]
    for _ in range(15):
        old, endings, current = g.pick(statuses)
        news = [f"I{e}" for e in g.rng.sample(endings, min(2, len(endings)))]
        g.change("relationships", [f"I'm {old}"], news, "is the user married", current, old,
                 attribute="relationship_status")
    for _ in range(20):
        p, q = g.pick(PEOPLE, 2)
        who = g.pick(["girlfriend", "boyfriend", "partner"])
        news = g.rng.sample([f"I broke up with {p}", f"{p} and I split up", f"I'm no longer with {p}",
                             f"I'm dating {q} now", f"My {who} is {q} now"], 2)
        g.change("relationships", [g.pick([f"I'm dating {p}", f"My {who} is {p}", f"My {who}'s name is {p}"])],
                 news, "who is the user's partner", q.lower() if any(q in n for n in news) else "none", p.lower(),
                 attribute="partner")


def preferences(g: Gen) -> None:
    for _ in range(30):
        thing = g.pick(list(FAVOURITES))
        a, b = g.pick(FAVOURITES[thing], 2)
        g.change("preferences", [g.pick([f"My favorite {thing} is {a}", f"My favourite {thing} is {a}",
                                         f"{a} is my favorite {thing}"])],
                 g.rng.sample([f"My favourite {thing} is now {b}", f"{b} is my new favorite {thing}",
                               f"My favorite {thing} these days is {b}", f"These days I'd say {b} is my favourite {thing}",
                               f"I've changed my mind, my favorite {thing} is {b}"], 3),
                 f"what is the user's favorite {thing}", b.lower(), a.lower(), attribute=f"favorite:{thing}")
    for _ in range(25):
        x = g.pick(FOODS)
        g.change("preferences", [g.pick([f"I love {x}", f"I really enjoy {x}", f"I'm a big fan of {x}"])],
                 g.rng.sample([f"I don't like {x} anymore", f"I no longer enjoy {x}", f"I can't stand {x} now",
                               f"I've gone off {x}", f"I stopped liking {x}", f"I'm not into {x} these days"], 3),
                 f"does the user like {x}", f"dislikes {x}", f"likes {x}", attribute="likes")
    for _ in range(15):
        a, b = g.pick(DRINKS)
        g.change("preferences", [g.pick([f"I drink {a} every morning", f"I always start the day with {a}",
                                         f"I love {a}"])],
                 g.rng.sample([f"I switched from {a} to {b}", f"I changed from {a} to {b} last month",
                               f"I drink {b} instead of {a} now"], 2),
                 "what does the user drink in the morning", b, a, attribute="drink")
    for _ in range(12):
        d = g.pick(DIETS)
        g.change("preferences", [g.pick([f"I'm {d}", f"I've been {d} for years", f"I'm a strict {d}"])],
                 g.rng.sample([f"I'm no longer {d}", f"I'm not {d} anymore", "I eat meat again now",
                               f"I gave up being {d}"], 2),
                 "what does the user eat", f"not {d}", d, attribute="diet")


def numbers(g: Gen) -> None:
    for _ in range(14):
        n = g.rng.randint(1, 3)
        m = n + 1
        g.change("numbers", [f"I have {n} kids"], g.rng.sample([f"I have {m} kids now", f"We have {m} kids now",
                                                                  f"I now have {m} kids"], 2),
                 "how many kids does the user have", str(m), str(n), attribute="kids")
    for _ in range(14):
        n = g.rng.randint(22, 58)
        g.change("numbers", [g.pick([f"I'm {n} years old", f"I am {n} years old"])],
                 g.rng.sample([f"I'm {n + 1} years old now", f"I turned {n + 1} last week", f"I am {n + 1} years old"], 2),
                 "how old is the user", str(n + 1), str(n), attribute="age")
    for _ in range(14):
        n = g.rng.randrange(600, 2000, 50)
        m = n + g.rng.randrange(50, 400, 50)
        g.change("numbers", [f"My rent is {n} euros a month"],
                 g.rng.sample([f"My rent is now {m} euros a month", f"My rent went up to {m} euros a month",
                               f"I pay {m} euros a month in rent now"], 2),
                 "how much is the user's rent", str(m), str(n), attribute="rent")
    for _ in range(14):
        n = g.rng.randint(5, 40)
        m = n + g.rng.randint(2, 15)
        g.change("numbers", [f"I run {n} km every week"],
                 g.rng.sample([f"I run {m} km every week now", f"I'm up to {m} km a week of running",
                               f"I now run {m} km every week"], 2),
                 "how far does the user run each week", str(m), str(n), attribute="running")
    for _ in range(10):
        n = g.rng.randint(5, 7)
        g.change("numbers", [f"I sleep {n} hours a night"], [f"I sleep {n + 2} hours a night now",
                                                               f"These days I get {n + 2} hours of sleep"],
                 "how much does the user sleep", str(n + 2), str(n), attribute="sleep")


def plans(g: Gen) -> None:
    for _ in range(20):
        place = g.pick(PLACES_TO_VISIT)
        a, b = g.pick(MONTHS, 2)
        g.change("plans", [g.pick([f"My trip to {place} is in {a}", f"I'm going to {place} in {a}"])],
                 g.rng.sample([f"My trip to {place} is now in {b}", f"My trip to {place} moved to {b}",
                               f"I'm going to {place} in {b} now", f"We pushed the {place} trip to {b}"], 2),
                 f"when is the user's trip to {place}", b.lower(), a.lower(), attribute="trip")
    for _ in range(15):
        place = g.pick(PLACES_TO_VISIT)
        g.change("plans", [g.pick([f"I'm planning to visit {place} in {g.pick(MONTHS)}", f"I plan to visit {place}"])],
                 g.rng.sample([f"I cancelled my trip to {place}", f"I'm no longer going to {place}",
                               f"The {place} trip is off"], 2),
                 f"is the user going to {place}", "cancelled", "planned", attribute="plan")
    for _ in range(12):
        d1, d2 = g.rng.sample(range(1, 28), 2)
        m = g.pick(MONTHS)
        g.change("plans", [f"Our wedding is on {m} {d1}"],
                 g.rng.sample([f"Our wedding is now on {m} {d2}", f"We moved the wedding to {m} {d2}",
                               f"The wedding date changed to {m} {d2}"], 2),
                 "when is the user's wedding", f"{m.lower()} {d2}", f"{m.lower()} {d1}", attribute="wedding")


def pets(g: Gen) -> None:
    for _ in range(15):
        n = g.rng.randint(1, 3)
        kind = g.pick(["cats", "dogs", "rabbits"])
        g.change("pets", [f"I have {n} {kind}"], g.rng.sample([f"I have {n + 1} {kind} now",
                                                               f"We have {n + 1} {kind} now",
                                                               f"We adopted another one, so {n + 1} {kind}"], 2),
                 f"how many {kind} does the user have", str(n + 1), str(n), attribute=f"{kind}_count")
    for _ in range(15):
        kind = g.pick(PETS)
        p = g.pick(PET_NAMES)
        g.change("pets", [g.pick([f"I have a {kind} named {p}", f"My {kind} is called {p}"])],
                 g.rng.sample([f"I lost my {kind} {p}", f"I had to put down my {kind} {p}", f"{p} passed away last week",
                               f"I rehomed {p}"], 2),
                 f"does the user have a {kind}", "no", f"{p.lower()}", attribute=f"pet:{kind}")
    for _ in range(10):
        kind = g.pick(PETS[:2])
        p, q = g.pick(PET_NAMES, 2)
        g.change("pets", [f"My {kind}'s name is {p}"], [f"My {kind}'s name is {q} now", f"We renamed the {kind} {q}"],
                 f"what is the name of the user's {kind}", q.lower(), p.lower(), attribute=f"pet:{kind}")


def health(g: Gen) -> None:
    for _ in range(15):
        x = g.pick(ALLERGENS)
        g.change("health", [f"I'm allergic to {x}"],
                 g.rng.sample([f"I'm no longer allergic to {x}", f"I'm not allergic to {x} anymore",
                               f"I outgrew my {x} allergy"], 2),
                 f"is the user allergic to {x}", "no", "yes", attribute="allergy")
    for _ in range(15):
        med = g.pick(MEDS)
        g.change("health", [g.pick([f"I take {med} every day", f"I'm on {med}"])],
                 g.rng.sample([f"I stopped taking {med}", f"I'm no longer taking {med}", f"I came off {med}",
                               f"My doctor took me off {med}"], 2),
                 f"does the user take {med}", "no", "yes", attribute="medication")
    for _ in range(10):
        c = g.pick(CONDITIONS)
        g.change("health", [f"I was diagnosed with {c}"],
                 g.rng.sample([f"I recovered from {c}", f"I no longer have {c}", f"My {c} is gone now"], 2),
                 f"does the user have {c}", "recovered", "has it", attribute="condition")


def repeats(g: Gen) -> None:
    makers: list[tuple[str, Callable[[], tuple[list[str], str]]]] = []

    def place() -> tuple[list[str], str]:
        a = g.pick(CITIES)
        return [f"I live in {a}", f"I'm based in {a}", f"I still live in {a}", f"Actually, I live in {a}.",
                f"I'm living in {a}"], a.lower()

    def job() -> tuple[list[str], str]:
        c = g.pick(COMPANIES)
        return [f"I work at {c}", f"I work for {c}", f"I'm working at {c}", f"I'm employed by {c}",
                f"I still work at {c}"], c.lower()

    def fav() -> tuple[list[str], str]:
        thing = g.pick(list(FAVOURITES))
        v = g.pick(FAVOURITES[thing])
        return [f"My favorite {thing} is {v}", f"My favourite {thing} is {v}", f"{v} is my favorite {thing}",
                f"My favorite {thing} is still {v}"], v.lower()

    def like() -> tuple[list[str], str]:
        x = g.pick(FOODS)
        return [f"I love {x}", f"I really love {x}", f"I love {x}!", f"I'm a big fan of {x}"], x

    def allergy() -> tuple[list[str], str]:
        x = g.pick(ALLERGENS)
        return [f"I'm allergic to {x}", f"I am allergic to {x}", f"I'm allergic to {x}."], x

    def pet() -> tuple[list[str], str]:
        kind, p = g.pick(PETS), g.pick(PET_NAMES)
        return [f"I have a {kind} named {p}", f"I have a {kind} called {p}", f"My {kind} is called {p}"], p.lower()

    def number() -> tuple[list[str], str]:
        n = g.rng.randint(2, 4)
        return [f"I have {n} kids", f"I have {n} kids.", f"I still have {n} kids"], str(n)

    def habit() -> tuple[list[str], str]:
        sport = g.pick(["yoga", "swimming", "climbing", "running", "cycling"])
        day = g.pick(["Mondays", "Tuesdays", "Thursdays", "Saturdays"])
        return [f"I go {sport} on {day}", f"I go {sport} on {day}.", f"I usually go {sport} on {day}",
                f"I go {sport} every week on {day}"], sport

    def relative() -> tuple[list[str], str]:
        rel, a = g.pick(RELATIVES[:6]), g.pick(CITIES)
        return [f"My {rel} lives in {a}", f"My {rel} lives in {a}.", f"My {rel} still lives in {a}"], a.lower()

    def language() -> tuple[list[str], str]:
        lang = g.pick(LANGUAGES)
        return [f"I'm learning {lang}", f"I am learning {lang}", f"I'm learning {lang} at the moment"], lang.lower()

    makers = [("places", place), ("jobs", job), ("preferences", fav), ("preferences", like), ("health", allergy),
              ("pets", pet), ("numbers", number), ("plans", habit), ("relationships", relative),
              ("preferences", language)]
    for i in range(120):
        category, make = makers[(i // 2) % len(makers)]  # each kind of repeat in both splits (ids alternate)
        statements, value = make()
        k = g.rng.randint(2, min(4, len(statements)))
        g.repeat(category, g.rng.sample(statements, k), value)


def negatives(g: Gen) -> None:
    for _ in range(25):
        a = g.pick(CITIES)
        rel = g.pick(RELATIVES[:6])
        g.negative("places", f"I live in {a}", f"My {rel} lives in {a}", "another subject")
    for _ in range(15):
        a, b = g.pick(CITIES, 2)
        g.negative("places", f"I grew up in {a}", f"I live in {b}", "hometown, not where the user lives")
    for _ in range(10):
        a, b = g.pick(CITIES, 2)
        r1, r2 = g.pick(RELATIVES[:6], 2)
        g.negative("places", f"My {r1} lives in {a}", f"My {r2} lives in {b}", "two relatives")
    for _ in range(15):
        c = g.pick(COMPANIES)
        rel = g.pick(RELATIVES)
        g.negative("jobs", f"I work at {c}", f"My {rel} works at {c}", "another subject")
    for _ in range(15):
        x, y = g.pick(FOODS, 2)
        g.negative("preferences", f"I love {x}", f"I love {y}", "two things liked")
    for _ in range(10):
        la, lb = g.pick(LANGUAGES, 2)
        g.negative("preferences", f"I speak {la}", f"I speak {lb}", "two languages")
    for _ in range(10):
        t1, t2 = g.pick(list(FAVOURITES), 2)
        v = g.pick(FAVOURITES[t1])
        w = g.pick(FAVOURITES[t2])
        g.negative("preferences", f"My favorite {t1} is {v}", f"My favorite {t2} is {w}", "two favourites")
    for _ in range(15):
        x, y = g.pick(ALLERGENS, 2)
        g.negative("health", f"I'm allergic to {x}", f"I'm allergic to {y}", "two allergies")
    for _ in range(10):
        m1, m2 = g.pick(MEDS, 2)
        g.negative("health", f"I take {m1} every day", f"I take {m2} every day", "two medications")
    for _ in range(15):
        n = g.rng.randint(1, 4)
        k1, k2 = g.pick(["cats", "dogs", "kids", "bikes", "cars", "guitars"], 2)
        g.negative("numbers", f"I have {n} {k1}", f"I have {n} {k2}", "counts of other things")
    for _ in range(10):
        n = g.rng.randint(1, 4)
        rel = g.pick(RELATIVES[:6])
        g.negative("numbers", f"I have {n} kids", f"My {rel} has {n + 1} kids", "another subject's number")
    for _ in range(15):
        p1, p2 = g.pick(PLACES_TO_VISIT, 2)
        m = g.pick(MONTHS)
        g.negative("plans", f"My trip to {p1} is in {m}", f"My trip to {p2} is in {m}", "two trips")
    for _ in range(10):
        kind = g.pick(PETS)
        p, q = g.pick(PET_NAMES, 2)
        rel = g.pick(RELATIVES[:6])
        g.negative("pets", f"I have a {kind} named {p}", f"My {rel} has a {kind} named {q}", "another owner")
    for _ in range(10):
        p, q = g.pick(PEOPLE, 2)
        g.negative("relationships", f"My sister's name is {p}", f"My name is {q}", "the sister's name, not the user's")
    for _ in range(10):
        p = g.pick(PEOPLE)
        rel = g.pick(RELATIVES)
        g.negative("relationships", f"I'm married to {p}", f"My {rel} is married to {g.pick(PEOPLE)}", "another couple")


def main() -> None:
    g = Gen()
    for family in (places, jobs, relationships, preferences, numbers, plans, pets, health, repeats, negatives):
        family(g)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for record in g.records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for r in g.records:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(f"wrote {len(g.records)} records to {OUT}: {kinds}")


if __name__ == "__main__":
    main()

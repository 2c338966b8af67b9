"""Write the offline suite's generated JSON-lines data (``shipyard/evaluation/suite/*.jsonl``).

    .venvs/base/bin/python -m shipyard.evaluation.suite_data            # rewrite the files
    .venvs/base/bin/python -m shipyard.evaluation.suite_data --check    # exit 1 if a file differs

Deterministic: the word lists below and one ``random.Random(SEED + task)`` per task, so the same
script always writes the same bytes (``tests/test_offline_suite.py`` checks the committed files
against it). ``prose_ppl.jsonl`` is hand-written and not touched. A maintainer's tool: the
data it writes is what the suite ships and evaluates; nothing runs this at evaluation time.

Sizing (why these counts): the local run gates the 0/1 ``acc``/``exact_match`` metrics with a paired
non-inferiority test at a 5-point margin; its minimum detectable loss is
``(z(1 - alpha/m) + z(power)) * sqrt(discordance / n)``, so each gated task needs
``n > (z(1 - alpha/m) + z(power))^2 * discordance / margin^2`` items. The measured discordance of
SmolLM2-135M-Instruct and its W8A8 candidate and the resulting figures are in
``benchmarks/README.md`` (local suite sizing).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

from shipyard.evaluation.config import SUITE_DIR

SUITE = SUITE_DIR
SEED = 31
ARITHMETIC_MC_ITEMS = 304
ARITHMETIC_GEN_ITEMS = 504
ARITHMETIC_GEN_MAX = 99
#: few-shot examples per task (the ``train`` split; the local run evaluates zero-shot)
FEWSHOT = 4

# --- capitals: unambiguous capitals only (no country with two capitals, a moved or disputed one) --
CAPITALS: list[tuple[str, str, tuple[str, ...]]] = [
    ("Afghanistan", "Kabul", ()), ("Albania", "Tirana", ()), ("Algeria", "Algiers", ()),
    ("Andorra", "Andorra la Vella", ()), ("Angola", "Luanda", ()), ("Argentina", "Buenos Aires", ()),
    ("Armenia", "Yerevan", ()), ("Australia", "Canberra", ()), ("Austria", "Vienna", ()),
    ("Azerbaijan", "Baku", ()), ("the Bahamas", "Nassau", ()), ("Bahrain", "Manama", ()),
    ("Bangladesh", "Dhaka", ()), ("Barbados", "Bridgetown", ()), ("Belarus", "Minsk", ()),
    ("Belgium", "Brussels", ()), ("Belize", "Belmopan", ()), ("Bhutan", "Thimphu", ()),
    ("Bosnia and Herzegovina", "Sarajevo", ()), ("Botswana", "Gaborone", ()), ("Brazil", "Brasilia", ("Brasília",)),
    ("Brunei", "Bandar Seri Begawan", ()), ("Bulgaria", "Sofia", ()), ("Burkina Faso", "Ouagadougou", ()),
    ("Cambodia", "Phnom Penh", ()), ("Cameroon", "Yaounde", ("Yaoundé",)), ("Canada", "Ottawa", ()),
    ("Cape Verde", "Praia", ()), ("the Central African Republic", "Bangui", ()), ("Chad", "N'Djamena", ()),
    ("Chile", "Santiago", ()), ("China", "Beijing", ("Peking",)), ("Colombia", "Bogota", ("Bogotá",)),
    ("Comoros", "Moroni", ()), ("Costa Rica", "San Jose", ("San José",)), ("Croatia", "Zagreb", ()),
    ("Cuba", "Havana", ()), ("Cyprus", "Nicosia", ()), ("the Czech Republic", "Prague", ()),
    ("the Democratic Republic of the Congo", "Kinshasa", ()), ("Denmark", "Copenhagen", ()),
    ("Dominica", "Roseau", ()), ("the Dominican Republic", "Santo Domingo", ()), ("East Timor", "Dili", ()),
    ("Ecuador", "Quito", ()), ("Egypt", "Cairo", ()), ("El Salvador", "San Salvador", ()),
    ("Equatorial Guinea", "Malabo", ()), ("Eritrea", "Asmara", ()), ("Estonia", "Tallinn", ()),
    ("Ethiopia", "Addis Ababa", ()), ("Fiji", "Suva", ()), ("Finland", "Helsinki", ()), ("France", "Paris", ()),
    ("Gabon", "Libreville", ()), ("the Gambia", "Banjul", ()), ("Georgia", "Tbilisi", ()),
    ("Germany", "Berlin", ()), ("Ghana", "Accra", ()), ("Greece", "Athens", ()), ("Grenada", "St. George's", ()),
    ("Guatemala", "Guatemala City", ()), ("Guinea", "Conakry", ()), ("Guinea-Bissau", "Bissau", ()),
    ("Guyana", "Georgetown", ()), ("Haiti", "Port-au-Prince", ()), ("Honduras", "Tegucigalpa", ()),
    ("Hungary", "Budapest", ()), ("Iceland", "Reykjavik", ("Reykjavík",)), ("India", "New Delhi", ()),
    ("Indonesia", "Jakarta", ()), ("Iran", "Tehran", ()), ("Iraq", "Baghdad", ()), ("Ireland", "Dublin", ()),
    ("Italy", "Rome", ()), ("Jamaica", "Kingston", ()), ("Japan", "Tokyo", ()), ("Jordan", "Amman", ()),
    ("Kazakhstan", "Astana", ()), ("Kenya", "Nairobi", ()), ("Kuwait", "Kuwait City", ()),
    ("Kyrgyzstan", "Bishkek", ()), ("Laos", "Vientiane", ()), ("Latvia", "Riga", ()), ("Lebanon", "Beirut", ()),
    ("Lesotho", "Maseru", ()), ("Liberia", "Monrovia", ()), ("Libya", "Tripoli", ()),
    ("Liechtenstein", "Vaduz", ()), ("Lithuania", "Vilnius", ()), ("Madagascar", "Antananarivo", ()),
    ("Malawi", "Lilongwe", ()), ("Malaysia", "Kuala Lumpur", ()), ("the Maldives", "Male", ("Malé",)),
    ("Mali", "Bamako", ()), ("Malta", "Valletta", ()), ("the Marshall Islands", "Majuro", ()),
    ("Mauritania", "Nouakchott", ()), ("Mauritius", "Port Louis", ()), ("Mexico", "Mexico City", ()),
    ("Moldova", "Chisinau", ("Chișinău",)), ("Mongolia", "Ulaanbaatar", ("Ulan Bator",)),
    ("Montenegro", "Podgorica", ()), ("Morocco", "Rabat", ()), ("Mozambique", "Maputo", ()),
    ("Myanmar", "Naypyidaw", ("Nay Pyi Taw",)), ("Namibia", "Windhoek", ()), ("Nepal", "Kathmandu", ()),
    ("the Netherlands", "Amsterdam", ()), ("New Zealand", "Wellington", ()), ("Nicaragua", "Managua", ()),
    ("Niger", "Niamey", ()), ("Nigeria", "Abuja", ()), ("North Korea", "Pyongyang", ()),
    ("North Macedonia", "Skopje", ()), ("Norway", "Oslo", ()), ("Oman", "Muscat", ()),
    ("Pakistan", "Islamabad", ()), ("Panama", "Panama City", ()), ("Papua New Guinea", "Port Moresby", ()),
    ("Paraguay", "Asuncion", ("Asunción",)), ("Peru", "Lima", ()), ("the Philippines", "Manila", ()),
    ("Poland", "Warsaw", ()), ("Portugal", "Lisbon", ()), ("Qatar", "Doha", ()),
    ("the Republic of the Congo", "Brazzaville", ()), ("Romania", "Bucharest", ()), ("Russia", "Moscow", ()),
    ("Rwanda", "Kigali", ()), ("Saint Lucia", "Castries", ()), ("Samoa", "Apia", ()),
    ("Saudi Arabia", "Riyadh", ()), ("Senegal", "Dakar", ()), ("Serbia", "Belgrade", ()),
    ("Seychelles", "Victoria", ()), ("Sierra Leone", "Freetown", ()), ("Slovakia", "Bratislava", ()),
    ("Slovenia", "Ljubljana", ()), ("the Solomon Islands", "Honiara", ()), ("Somalia", "Mogadishu", ()),
    ("South Korea", "Seoul", ()), ("South Sudan", "Juba", ()), ("Spain", "Madrid", ()), ("Sudan", "Khartoum", ()),
    ("Suriname", "Paramaribo", ()), ("Sweden", "Stockholm", ()), ("Switzerland", "Bern", ("Berne",)),
    ("Syria", "Damascus", ()), ("Tajikistan", "Dushanbe", ()), ("Tanzania", "Dodoma", ()),
    ("Thailand", "Bangkok", ()), ("Togo", "Lome", ("Lomé",)), ("Tonga", "Nuku'alofa", ()),
    ("Trinidad and Tobago", "Port of Spain", ()), ("Tunisia", "Tunis", ()), ("Turkey", "Ankara", ()),
    ("Turkmenistan", "Ashgabat", ()), ("Uganda", "Kampala", ()), ("Ukraine", "Kyiv", ("Kiev",)),
    ("the United Arab Emirates", "Abu Dhabi", ()), ("the United Kingdom", "London", ()),
    ("the United States", "Washington", ("Washington, D.C.",)), ("Uruguay", "Montevideo", ()),
    ("Uzbekistan", "Tashkent", ()), ("Vanuatu", "Port Vila", ()), ("Venezuela", "Caracas", ()),
    ("Vietnam", "Hanoi", ()), ("Yemen", "Sanaa", ("Sana'a",)), ("Zambia", "Lusaka", ()),
    ("Zimbabwe", "Harare", ()),
]

#: first-level divisions with a settled capital, asked as "the capital of the US state of Texas"
STATE_CAPITALS: list[tuple[str, str, tuple[str, ...]]] = [
    (f"the US state of {state}", city, ()) for state, city in (
        ("Alabama", "Montgomery"), ("Alaska", "Juneau"), ("Arizona", "Phoenix"), ("Arkansas", "Little Rock"),
        ("California", "Sacramento"), ("Colorado", "Denver"), ("Connecticut", "Hartford"), ("Delaware", "Dover"),
        ("Florida", "Tallahassee"), ("Georgia", "Atlanta"), ("Hawaii", "Honolulu"), ("Idaho", "Boise"),
        ("Illinois", "Springfield"), ("Indiana", "Indianapolis"), ("Iowa", "Des Moines"), ("Kansas", "Topeka"),
        ("Kentucky", "Frankfort"), ("Louisiana", "Baton Rouge"), ("Maine", "Augusta"), ("Maryland", "Annapolis"),
        ("Massachusetts", "Boston"), ("Michigan", "Lansing"), ("Minnesota", "Saint Paul"),
        ("Mississippi", "Jackson"), ("Missouri", "Jefferson City"), ("Montana", "Helena"),
        ("Nebraska", "Lincoln"), ("Nevada", "Carson City"), ("New Hampshire", "Concord"),
        ("New Jersey", "Trenton"), ("New Mexico", "Santa Fe"), ("New York", "Albany"),
        ("North Carolina", "Raleigh"), ("North Dakota", "Bismarck"), ("Ohio", "Columbus"),
        ("Oklahoma", "Oklahoma City"), ("Oregon", "Salem"), ("Pennsylvania", "Harrisburg"),
        ("Rhode Island", "Providence"), ("South Carolina", "Columbia"), ("South Dakota", "Pierre"),
        ("Tennessee", "Nashville"), ("Texas", "Austin"), ("Utah", "Salt Lake City"), ("Vermont", "Montpelier"),
        ("Virginia", "Richmond"), ("Washington", "Olympia"), ("West Virginia", "Charleston"),
        ("Wisconsin", "Madison"), ("Wyoming", "Cheyenne"))
] + [
    (f"the Canadian province of {province}", city, ()) for province, city in (
        ("Ontario", "Toronto"), ("Quebec", "Quebec City"), ("British Columbia", "Victoria"), ("Alberta", "Edmonton"),
        ("Manitoba", "Winnipeg"), ("Saskatchewan", "Regina"), ("Nova Scotia", "Halifax"),
        ("New Brunswick", "Fredericton"), ("Newfoundland and Labrador", "St. John's"),
        ("Prince Edward Island", "Charlottetown"))
] + [
    (f"the Australian state of {state}", city, ()) for state, city in (
        ("New South Wales", "Sydney"), ("Victoria", "Melbourne"), ("Queensland", "Brisbane"),
        ("Western Australia", "Perth"), ("South Australia", "Adelaide"), ("Tasmania", "Hobart"))
]

# --- opposites: each pair works both ways; a distractor is never an opposite of the word --------
OPPOSITES: list[tuple[str, str]] = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("open", "closed"), ("fast", "slow"), ("happy", "sad"),
    ("light", "dark"), ("early", "late"), ("full", "empty"), ("good", "bad"), ("hard", "soft"),
    ("easy", "difficult"), ("high", "low"), ("in", "out"), ("left", "right"), ("long", "short"),
    ("tall", "short"), ("loud", "quiet"), ("new", "old"), ("young", "old"), ("rich", "poor"),
    ("strong", "weak"), ("thick", "thin"), ("wet", "dry"), ("win", "lose"), ("true", "false"), ("yes", "no"),
    ("push", "pull"), ("buy", "sell"), ("give", "take"), ("come", "go"), ("day", "night"), ("black", "white"),
    ("north", "south"), ("east", "west"), ("begin", "end"), ("start", "finish"), ("first", "last"),
    ("top", "bottom"), ("front", "back"), ("inside", "outside"), ("above", "below"), ("before", "after"),
    ("always", "never"), ("all", "none"), ("more", "less"), ("most", "least"), ("many", "few"),
    ("clean", "dirty"), ("safe", "dangerous"), ("alive", "dead"), ("awake", "asleep"), ("cheap", "expensive"),
    ("deep", "shallow"), ("near", "far"), ("wide", "narrow"), ("heavy", "light"), ("sweet", "sour"),
    ("tight", "loose"), ("smooth", "rough"), ("sharp", "blunt"), ("brave", "cowardly"), ("friend", "enemy"),
    ("love", "hate"), ("laugh", "cry"), ("accept", "refuse"), ("arrive", "leave"), ("ask", "answer"),
    ("increase", "decrease"), ("add", "subtract"), ("remember", "forget"), ("succeed", "fail"),
    ("borrow", "lend"), ("teach", "learn"), ("question", "answer"), ("whisper", "shout"), ("rise", "fall"),
    ("sink", "float"), ("freeze", "melt"), ("polite", "rude"), ("kind", "cruel"), ("generous", "selfish"),
    ("possible", "impossible"), ("legal", "illegal"), ("visible", "invisible"), ("correct", "incorrect"),
    ("known", "unknown"), ("agree", "disagree"), ("like", "dislike"), ("appear", "disappear"),
    ("lock", "unlock"), ("pack", "unpack"), ("import", "export"), ("inhale", "exhale"),
    ("include", "exclude"), ("input", "output"), ("maximum", "minimum"), ("major", "minor"),
    ("majority", "minority"), ("positive", "negative"), ("plus", "minus"), ("odd", "even"),
    ("sunrise", "sunset"), ("summer", "winter"), ("morning", "evening"), ("dawn", "dusk"), ("boy", "girl"),
    ("man", "woman"), ("husband", "wife"), ("brother", "sister"), ("father", "mother"), ("son", "daughter"),
    ("uncle", "aunt"), ("male", "female"), ("war", "peace"), ("victory", "defeat"), ("success", "failure"),
    ("profit", "loss"), ("attack", "defend"), ("entrance", "exit"), ("arrival", "departure"),
    ("ancient", "modern"), ("temporary", "permanent"), ("public", "private"), ("simple", "complex"),
    ("rare", "common"), ("wild", "tame"), ("raw", "cooked"), ("sick", "healthy"), ("bright", "dim"),
    ("beautiful", "ugly"), ("lazy", "hardworking"), ("absent", "present"), ("past", "future"),
    ("guilty", "innocent"), ("ascend", "descend"), ("forward", "backward"), ("upstairs", "downstairs"),
    ("inner", "outer"), ("upper", "lower"), ("internal", "external"), ("interior", "exterior"),
    ("horizontal", "vertical"), ("singular", "plural"), ("birth", "death"), ("tiny", "huge"),
    ("often", "rarely"), ("everything", "nothing"), ("on", "off"), ("over", "under"), ("together", "apart"),
    ("same", "different"), ("wrong", "right"), ("hungry", "full"), ("quick", "slow"), ("noisy", "quiet"),
    ("ally", "enemy"), ("mountain", "valley"), ("catch", "throw"), ("send", "receive"), ("sharp", "dull"),
    ("multiply", "divide"), ("large", "small"), ("little", "big"), ("ill", "healthy"), ("depart", "arrive"),
]
#: words that mean the same here: an opposite of one is an opposite of all, so never a distractor
SYNONYMS: list[set[str]] = [
    {"big", "huge", "large"}, {"small", "tiny", "little"}, {"fast", "quick"}, {"quiet", "silent"},
    {"loud", "noisy"}, {"right", "correct"}, {"wrong", "incorrect"}, {"end", "finish", "last"},
    {"begin", "start", "first"}, {"leave", "go", "depart", "exit"}, {"come", "arrive", "enter", "entrance"},
    {"rise", "ascend", "up"}, {"fall", "descend", "sink", "down"}, {"ill", "sick"}, {"hate", "dislike"},
    {"love", "like"}, {"lose", "fail"}, {"win", "succeed"}, {"victory", "success"}, {"defeat", "failure", "loss"},
    {"dull", "blunt", "dim"}, {"dark", "dim"}, {"bright", "light"}, {"old", "ancient"}, {"new", "modern"},
    {"hard", "difficult", "complex"}, {"easy", "simple"}, {"give", "lend", "send"}, {"take", "borrow", "receive"},
    {"question", "ask"}, {"enemy", "foe"}, {"huge", "big"}, {"full", "whole"}, {"empty", "hungry"},
    {"thin", "narrow"}, {"thick", "wide"}, {"below", "under", "beneath"}, {"above", "over"},
    {"outside", "out", "outer", "exterior", "external"}, {"inside", "in", "inner", "interior", "internal"},
    {"upper", "upstairs", "top", "high"}, {"lower", "downstairs", "bottom", "low"}, {"after", "later", "late"},
    {"before", "early"}, {"back", "backward"}, {"front", "forward"}, {"dead", "death"}, {"alive", "birth"},
    {"maximum", "most"}, {"minimum", "least"}, {"more", "plus", "increase", "add"}, {"less", "minus", "decrease",
                                                                                   "subtract"},
]

def split_rows(rows: list[dict], rng: random.Random) -> list[dict]:
    """The first FEWSHOT rows (after a shuffle) as ``train``, the rest ``test``."""
    rng.shuffle(rows)
    return [{"split": "train" if i < FEWSHOT else "test", **row} for i, row in enumerate(rows)]


def mc_row(question: str, answer: str, distractors: list[str], rng: random.Random) -> dict:
    """A 4-option multiple-choice row with the answer at a random position."""
    choices = [answer, *distractors]
    rng.shuffle(choices)
    return {"question": question, "choices": choices, "label": choices.index(answer)}


def arithmetic_mc(n: int, rng: random.Random) -> Iterator[dict]:
    """``n`` distinct sums of two two-digit numbers; three distractors drawn from 20-198, each at
    least 5 away from the sum (near misses like +-1 leave the 135M model below chance)."""
    seen: set[tuple[int, int]] = set()
    while len(seen) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        total = a + b
        wrong = rng.sample([x for x in range(20, 199) if abs(x - total) >= 5], 3)
        yield mc_row(f"What is {a} plus {b}?", str(total), [str(w) for w in wrong], rng)


def arithmetic_gen(n: int, rng: random.Random, high: int) -> Iterator[dict]:
    """``n`` distinct sums ``a + b`` of two two-digit numbers with a sum of at most ``high``, asked openly
    (two-digit answers: a three-digit sum gives the model one more digit to get wrong and doubles how
    often W8A8 flips an answer)."""
    seen: set[tuple[int, int]] = set()
    while len(seen) < n:
        a, b = rng.randint(10, high - 10), rng.randint(10, high - 10)
        if a + b > high or (a, b) in seen:
            continue
        seen.add((a, b))
        yield {"question": f"What is {a} plus {b}?", "a": a, "b": b, "answer": str(a + b)}


def places() -> list[tuple[str, str, tuple[str, ...]]]:
    """Countries, then US states, Canadian provinces and Australian states."""
    return CAPITALS + STATE_CAPITALS


def capitals_mc(rng: random.Random) -> Iterator[dict]:
    """Every place, three other places' capitals as distractors."""
    cities = sorted({city for _, city, _ in places()})
    for place, city, _ in places():
        yield mc_row(f"What is the capital of {place}?", city, rng.sample([c for c in cities if c != city], 3), rng)


def capitals_gen(rng: random.Random) -> Iterator[dict]:
    """Every place as an open question (aliases count as the answer)."""
    for place, city, aliases in places():
        yield {"question": f"What is the capital of {place}?", "answer": city,
               **({"aliases": list(aliases)} if aliases else {})}


def _opposite_map() -> dict[str, set[str]]:
    opposite: dict[str, set[str]] = {}
    for a, b in OPPOSITES:
        opposite.setdefault(a, set()).add(b)
        opposite.setdefault(b, set()).add(a)
    return opposite


def _asked() -> Iterator[tuple[str, str]]:
    """(word, answer): each OPPOSITES pair both ways, each word asked once."""
    asked: set[str] = set()
    for a, b in OPPOSITES:
        for word, answer in ((a, b), (b, a)):
            if word not in asked:
                asked.add(word)
                yield word, answer


def _same(word: str) -> set[str]:
    return {word}.union(*(group for group in SYNONYMS if word in group))


def opposites_mc(rng: random.Random) -> Iterator[dict]:
    """Every word of OPPOSITES; distractors: words that are neither an opposite of it nor of a synonym."""
    opposite = _opposite_map()
    words = sorted(opposite)
    for word, answer in _asked():
        # never offered: the word itself, anything meaning one of its opposites, any opposite of a synonym
        banned = _same(word).union(*(_same(o) for s in _same(word) for o in opposite.get(s, ())))
        pool = [w for w in words if w not in banned]
        yield mc_row(f'What is the opposite of "{word}"?', answer, rng.sample(pool, 3), rng)


def opposites_gen(rng: random.Random) -> Iterator[dict]:
    """Every word of OPPOSITES asked openly; any of its listed opposites (and their synonyms here) counts."""
    opposite = _opposite_map()
    for word, answer in _asked():
        also = sorted(set().union(*(_same(o) for o in opposite[word])) - {answer})
        yield {"question": f'What is the opposite of "{word}"?', "word": word, "answer": answer,
               **({"aliases": also} if also else {})}


def build() -> dict[str, list[dict]]:
    """Every generated file's rows, by file name."""
    def rng(task: str) -> random.Random:
        return random.Random(f"{SEED}:{task}")

    out = {}
    for name, gen in (("arithmetic_mc", lambda r: arithmetic_mc(ARITHMETIC_MC_ITEMS, r)),
                      ("arithmetic_gen", lambda r: arithmetic_gen(ARITHMETIC_GEN_ITEMS, r, ARITHMETIC_GEN_MAX)),
                      ("capitals_mc", capitals_mc), ("capitals_gen", capitals_gen),
                      ("opposites_mc", opposites_mc), ("opposites_gen", opposites_gen)):
        r = rng(name)
        out[f"{name}.jsonl"] = split_rows(list(gen(r)), r)
    return out


def render(rows: list[dict]) -> str:
    """JSON lines, one row each, non-ASCII kept."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    parser.add_argument("--out", type=Path, default=SUITE, help="folder to write (default: the suite)")
    args = parser.parse_args()
    differ = []
    for name, rows in build().items():
        path = args.out / name
        text = render(rows)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                differ.append(name)
        else:
            path.write_text(text, encoding="utf-8")
        test = sum(r["split"] == "test" for r in rows)
        print(f"{name:22} {test:4} test + {len(rows) - test} few-shot")
    if differ:
        print(f"differ from the generator: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Latent debate (arXiv 2512.01909): True/False statement sets with exact labels.

Five families are generated offline from a seed, each with exactly half true statements:
arithmetic (sums and products of small integers), comparisons ("a is larger than b"),
capitals (a built-in country -> capital table), negations (a capital or comparison
statement with "not", label flipped) and translations (a built-in English -> Spanish /
French / German word table). False statements are near misses (an off-by-one or
off-by-ten sum, another table entry), so the model cannot answer from the surface form.

`load_csv` reads a user file in the layout of the public true/false statement datasets
(Marks & Tegmark's geometry-of-truth cities / companies / common_claim / counterfact
CSVs): a header with at least the columns `statement,label`, label 1/0 or true/false.
"""
from __future__ import annotations

import csv
import dataclasses
import os

import numpy as np

FAMILIES = ("arithmetic", "comparison", "capitals", "negation", "translation")
# Families a 135M instruct model might judge above chance (issue 42's second setting):
# one-digit sums, common object colours, antonyms, category membership, sizes of
# everyday things. Which of them enter the study is chosen by `screen.py` on a
# separate screening set (README).
EASY_FAMILIES = ("digit_sum", "colour", "opposite", "category", "size", "continent", "place",
                 "animal_class", "negated_comparison")
# Cue-free versions of the families whose first slot gave the label away (issue 42, the
# independent review): the ordered pair of things is drawn first, with the same
# distribution for both labels, and the relation word ("larger" / "smaller") is chosen so
# that the statement has the label drawn for it. Neither slot nor the word alone says
# anything about the label; only the relation between them does (`cues.py` audits it).
CUE_FREE_FAMILIES = ("cf_comparison", "cf_negated_comparison", "cf_size")
ALL_FAMILIES = FAMILIES + EASY_FAMILIES + CUE_FREE_FAMILIES

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Portugal": "Lisbon", "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow",
    "Egypt": "Cairo", "Greece": "Athens", "Austria": "Vienna", "Poland": "Warsaw",
    "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen",
    "Ireland": "Dublin", "Hungary": "Budapest", "Kenya": "Nairobi", "Peru": "Lima",
    "Chile": "Santiago", "Argentina": "Buenos Aires", "Mexico": "Mexico City",
    "Canada": "Ottawa", "Australia": "Canberra", "India": "New Delhi", "Thailand": "Bangkok",
    "Vietnam": "Hanoi", "Iran": "Tehran", "Iraq": "Baghdad", "Turkey": "Ankara",
    "Cuba": "Havana", "Belgium": "Brussels", "Netherlands": "Amsterdam",
    "Switzerland": "Bern", "Brazil": "Brasilia", "Colombia": "Bogota",
    "South Korea": "Seoul", "Indonesia": "Jakarta", "Philippines": "Manila",
    "Ukraine": "Kyiv", "Romania": "Bucharest", "Nigeria": "Abuja", "Morocco": "Rabat",
}

# English word -> (Spanish, French, German)
WORDS = {
    "dog": ("perro", "chien", "Hund"), "cat": ("gato", "chat", "Katze"),
    "house": ("casa", "maison", "Haus"), "water": ("agua", "eau", "Wasser"),
    "book": ("libro", "livre", "Buch"), "sun": ("sol", "soleil", "Sonne"),
    "moon": ("luna", "lune", "Mond"), "bread": ("pan", "pain", "Brot"),
    "tree": ("arbol", "arbre", "Baum"), "red": ("rojo", "rouge", "rot"),
    "green": ("verde", "vert", "grun"), "apple": ("manzana", "pomme", "Apfel"),
    "friend": ("amigo", "ami", "Freund"), "city": ("ciudad", "ville", "Stadt"),
    "car": ("coche", "voiture", "Auto"), "fire": ("fuego", "feu", "Feuer"),
    "milk": ("leche", "lait", "Milch"), "night": ("noche", "nuit", "Nacht"),
    "sea": ("mar", "mer", "Meer"), "king": ("rey", "roi", "Konig"),
    "horse": ("caballo", "cheval", "Pferd"), "school": ("escuela", "ecole", "Schule"),
    "black": ("negro", "noir", "schwarz"), "white": ("blanco", "blanc", "weiss"),
}
LANGUAGES = ("Spanish", "French", "German")

# Things with one unambiguous everyday colour (the colour list below).
COLOURS = ("red", "green", "blue", "yellow", "white", "black", "brown", "orange", "purple",
           "pink")
COLOUR_OF = {
    "grass": "green", "snow": "white", "coal": "black", "blood": "red", "a banana": "yellow",
    "the clear sky": "blue", "milk": "white", "a lemon": "yellow", "a ripe tomato": "red",
    "a carrot": "orange", "chocolate": "brown", "a crow": "black", "a strawberry": "red",
    "a lime": "green", "a pumpkin": "orange", "ink": "black", "a leaf": "green",
    "a cucumber": "green", "a polar bear": "white", "a flamingo": "pink", "a raven": "black",
    "soil": "brown", "a swan": "white", "a blueberry": "blue", "an eggplant": "purple",
    "tar": "black", "chalk": "white", "a fire engine": "red", "coffee": "brown",
    "a cherry": "red", "a lavender flower": "purple", "a frog": "green", "a yolk": "yellow",
    "a sunflower": "yellow", "cotton": "white", "a sapphire": "blue", "a pig": "pink",
    "a canary": "yellow", "a chick": "yellow", "a school bus": "yellow", "butter": "yellow",
    "a daffodil": "yellow", "a tangerine": "orange", "a goldfish": "orange",
    "a basketball": "orange", "a traffic cone": "orange", "an apricot": "orange",
    "a ruby": "red", "a ladybug": "red", "a stop sign": "red", "ketchup": "red",
    "a cardinal": "red", "an emerald": "green", "a pea": "green", "an avocado": "green",
    "a pine tree": "green", "moss": "green", "spinach": "green", "broccoli": "green",
    "a lettuce": "green", "a cloud": "white", "a tooth": "white", "salt": "white",
    "sugar": "white", "flour": "white", "a pearl": "white", "soot": "black",
    "a blackberry": "black", "a panther": "black", "cinnamon": "brown", "a walnut": "brown",
    "a chestnut": "brown", "a coconut": "brown", "the ocean": "blue", "a bluebird": "blue",
    "denim": "blue", "a violet": "purple", "a plum": "purple", "an amethyst": "purple",
    "bubblegum": "pink", "a piglet": "pink",
}

# Antonym pairs (each read both ways: "the opposite of hot is cold", "... of cold is hot").
OPPOSITES = (
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("day", "night"),
    ("happy", "sad"), ("old", "young"), ("open", "closed"), ("light", "dark"),
    ("tall", "short"), ("wet", "dry"), ("full", "empty"), ("hard", "soft"), ("rich", "poor"),
    ("early", "late"), ("left", "right"), ("win", "lose"), ("push", "pull"),
    ("strong", "weak"), ("thick", "thin"), ("loud", "quiet"), ("clean", "dirty"),
    ("inside", "outside"), ("begin", "end"), ("buy", "sell"), ("heavy", "light"),
)

# Category -> members (with their article); each member belongs to exactly one category
# (no tomato / orange / cucumber / cricket kind of double membership).
CATEGORIES = {
    "an animal": ("a dog", "a cat", "a horse", "a cow", "a lion", "a tiger", "a rabbit",
                  "an elephant", "a sheep", "a bear", "a giraffe", "a zebra", "a monkey"),
    "a fruit": ("an apple", "a banana", "a pear", "a peach", "a mango", "a grape",
                "a cherry", "a plum", "a lemon", "a pineapple", "a strawberry",
                "a watermelon", "an apricot"),
    "a vehicle": ("a car", "a bus", "a truck", "a bicycle", "a train", "a motorcycle",
                  "a tractor", "a van", "a taxi", "a scooter", "an ambulance", "a tram"),
    "a musical instrument": ("a piano", "a guitar", "a violin", "a drum", "a flute",
                             "a trumpet", "a harp", "a cello", "a saxophone", "a clarinet",
                             "a trombone", "an accordion"),
    "a piece of furniture": ("a chair", "a table", "a sofa", "a bed", "a desk",
                             "a wardrobe", "a bookshelf", "a stool", "a dresser", "a couch",
                             "a cabinet", "a bench"),
    "a colour": ("red", "blue", "green", "yellow", "purple", "pink", "brown", "grey",
                 "black", "white"),
    "a body part": ("an arm", "a leg", "a hand", "a foot", "a nose", "an ear", "a knee",
                    "an elbow", "a finger", "a toe", "a shoulder", "a chin"),
    "a drink": ("water", "milk", "juice", "tea", "coffee", "lemonade", "soda", "cocoa"),
    "a vegetable": ("a carrot", "a potato", "an onion", "a cabbage", "broccoli", "spinach",
                    "a lettuce", "a turnip", "a leek", "cauliflower", "celery"),
    "a tool": ("a hammer", "a screwdriver", "a wrench", "a saw", "a drill", "a chisel",
               "a shovel", "a rake", "an axe"),
    "a piece of clothing": ("a shirt", "a jacket", "a coat", "a dress", "a skirt",
                            "a sweater", "a sock", "a scarf", "a glove", "a blouse"),
    "a country": ("France", "Germany", "Japan", "Brazil", "Canada", "Egypt", "India",
                  "Mexico", "Kenya", "Norway", "Peru", "Spain"),
    "a sport": ("football", "tennis", "golf", "basketball", "baseball", "hockey", "rugby",
                "volleyball", "boxing"),
}

# Country -> continent (no transcontinental countries).
CONTINENT_OF = {
    "France": "Europe", "Germany": "Europe", "Italy": "Europe", "Spain": "Europe",
    "Portugal": "Europe", "Greece": "Europe", "Austria": "Europe", "Poland": "Europe",
    "Norway": "Europe", "Sweden": "Europe", "Finland": "Europe", "Denmark": "Europe",
    "Ireland": "Europe", "Hungary": "Europe", "Belgium": "Europe", "Netherlands": "Europe",
    "Switzerland": "Europe", "Ukraine": "Europe", "Romania": "Europe",
    "Japan": "Asia", "China": "Asia", "India": "Asia", "Thailand": "Asia", "Vietnam": "Asia",
    "Iran": "Asia", "Iraq": "Asia", "South Korea": "Asia", "Philippines": "Asia",
    "Nepal": "Asia", "Pakistan": "Asia", "Mongolia": "Asia", "Malaysia": "Asia",
    "Kenya": "Africa", "Nigeria": "Africa", "Morocco": "Africa", "Ghana": "Africa",
    "Ethiopia": "Africa", "Senegal": "Africa", "Uganda": "Africa", "Tanzania": "Africa",
    "Algeria": "Africa", "Angola": "Africa",
    "Peru": "South America", "Chile": "South America", "Argentina": "South America",
    "Brazil": "South America", "Colombia": "South America", "Venezuela": "South America",
    "Bolivia": "South America", "Uruguay": "South America", "Ecuador": "South America",
    "Canada": "North America", "Mexico": "North America", "Cuba": "North America",
    "Guatemala": "North America", "Jamaica": "North America",
    "Australia": "Australia", "New Zealand": "Australia",
}
CONTINENTS = ("Europe", "Asia", "Africa", "South America", "North America", "Australia")

# Animal -> class (zoology's, no borderline members).
ANIMAL_CLASS = {
    "a dog": "a mammal", "a cat": "a mammal", "a horse": "a mammal", "a cow": "a mammal",
    "a lion": "a mammal", "a mouse": "a mammal", "a bear": "a mammal", "a monkey": "a mammal",
    "a whale": "a mammal", "a rabbit": "a mammal",
    "an eagle": "a bird", "a sparrow": "a bird", "a parrot": "a bird", "an owl": "a bird",
    "a penguin": "a bird", "a duck": "a bird", "a pigeon": "a bird", "a crow": "a bird",
    "a shark": "a fish", "a salmon": "a fish", "a trout": "a fish", "a tuna": "a fish",
    "a goldfish": "a fish", "a cod": "a fish",
    "a snake": "a reptile", "a lizard": "a reptile", "a crocodile": "a reptile",
    "a turtle": "a reptile", "an iguana": "a reptile",
    "an ant": "an insect", "a bee": "an insect", "a fly": "an insect",
    "a butterfly": "an insect", "a beetle": "an insect", "a mosquito": "an insect",
    "a frog": "an amphibian", "a toad": "an amphibian", "a salamander": "an amphibian",
}
ANIMAL_CLASSES = ("a mammal", "a bird", "a fish", "a reptile", "an insect", "an amphibian")

# Everyday things in increasing size (each clearly larger than the one before).
SIZES = ("an ant", "a coin", "a mouse", "an apple", "a cat", "a dog", "a person",
         "a horse", "a car", "an elephant", "a house", "a whale", "a mountain", "the Moon",
         "the Earth", "the Sun")


@dataclasses.dataclass
class StatementSet:
  statements: list      # str
  labels: np.ndarray    # (N,) int 1 = true
  families: list        # str, one per statement

  def __len__(self):
    return len(self.statements)

  def family_ids(self):
    names = sorted(set(self.families))
    return np.array([names.index(f) for f in self.families]), names


def _arithmetic(rng, truth: bool) -> str:
  if rng.random() < 0.5:
    a, b = rng.integers(2, 60, size=2)
    c = a + b
    op = "+"
  else:
    a, b = rng.integers(2, 13, size=2)
    c = a * b
    op = "*"
  if not truth:
    c = c + int(rng.choice([-10, -2, -1, 1, 2, 10]))
  return f"{a} {op} {b} = {c}."


def _comparison_pair(rng, truth: bool):
  a, b = rng.choice(np.arange(1, 100), size=2, replace=False)
  if (a > b) != truth:
    a, b = b, a
  return int(a), int(b)


def _cue_free_relation(rng, truth: bool, negated: bool, n_items: int):
  """(first, second, word) for "<first> is [not] <word> than <second>", ranks in
  0..n_items-1: the unordered pair and its order are drawn independently of the label,
  the word ("larger" / "smaller") makes the statement's truth equal `truth`."""
  i, j = (int(x) for x in rng.choice(n_items, size=2, replace=False))
  larger = i > j                  # "first is larger than second" holds
  # the plain statement "first is <word> than second" is true iff word matches the
  # order; a negated one iff it does not
  word_is_larger = larger == (truth != negated)
  return i, j, "larger" if word_is_larger else "smaller"


def _cf_comparison(rng, truth: bool, negated: bool) -> str:
  i, j, word = _cue_free_relation(rng, truth, negated, 99)
  return f"{i + 1} is {'not ' if negated else ''}{word} than {j + 1}."


def _cf_size(rng, truth: bool) -> str:
  i, j, word = _cue_free_relation(rng, truth, False, len(SIZES))
  return f"{_cap(SIZES[i])} is {word} than {SIZES[j]}."


def _capital_pair(rng, truth: bool):
  countries = sorted(CAPITALS)
  country = countries[rng.integers(len(countries))]
  if truth:
    return country, CAPITALS[country]
  others = [CAPITALS[c] for c in countries if c != country]
  return country, others[rng.integers(len(others))]


def _negation(rng, truth: bool) -> str:
  # "X is not Y" is true exactly when "X is Y" is false.
  if rng.random() < 0.5:
    country, city = _capital_pair(rng, not truth)
    return f"The capital of {country} is not {city}."
  a, b = _comparison_pair(rng, not truth)
  return f"{a} is not larger than {b}."


def _translation(rng, truth: bool) -> str:
  words = sorted(WORDS)
  word = words[rng.integers(len(words))]
  li = int(rng.integers(len(LANGUAGES)))
  target = WORDS[word][li]
  if not truth:
    others = [WORDS[w][li] for w in words if w != word]
    target = others[rng.integers(len(others))]
  return f"The {LANGUAGES[li]} word for \"{word}\" is \"{target}\"."


def _pick(rng, seq):
  return seq[int(rng.integers(len(seq)))]


def _cap(s: str) -> str:
  return s[0].upper() + s[1:]


def _digit_sum(rng, truth: bool) -> str:
  a, b = (int(x) for x in rng.integers(1, 10, size=2))
  c = a + b
  if not truth:
    c = c + int(rng.choice([-2, -1, 1, 2]))
  return f"{a} + {b} = {c}."


def _table_fact(rng, table: dict, values, truth: bool):
  """(key, value) of a table: the key's own value, or another of `values` when false."""
  key = _pick(rng, sorted(table))
  value = table[key]
  if not truth:
    value = _pick(rng, [v for v in values if v != value])
  return key, value


def _colour(rng, truth: bool) -> str:
  thing, colour = _table_fact(rng, COLOUR_OF, COLOURS, truth)
  if rng.random() < 0.5:
    return f"The colour of {thing} is {colour}."
  return f"{_cap(thing)} is {colour}."


def _opposite(rng, truth: bool) -> str:
  pair = OPPOSITES[int(rng.integers(len(OPPOSITES)))]
  word, other = pair if rng.random() < 0.5 else pair[::-1]
  if not truth:
    # another pair's word: never an antonym of `word` (no word is in two pairs with
    # the same partner; "light" is in two pairs and is skipped as a false answer)
    cands = sorted({w for p in OPPOSITES for w in p if word not in p and w != "light"})
    other = _pick(rng, cands)
  return f"The opposite of \"{word}\" is \"{other}\"."


def _category(rng, truth: bool) -> str:
  cats = sorted(CATEGORIES)
  cat = _pick(rng, cats)
  member = _pick(rng, CATEGORIES[cat])
  if not truth:
    cat = _pick(rng, [c for c in cats if c != cat])
  return f"{_cap(member)} is {cat}."


def _size(rng, truth: bool) -> str:
  i, j = rng.choice(len(SIZES), size=2, replace=False)
  big, small = (SIZES[max(i, j)], SIZES[min(i, j)])
  if not truth:
    big, small = small, big
  return f"{_cap(big)} is larger than {small}."


def _continent(rng, truth: bool) -> str:
  country, continent = _table_fact(rng, CONTINENT_OF, CONTINENTS, truth)
  return f"{country} is a country in {continent}."


def _place(rng, truth: bool) -> str:
  # a table country or capital called a country or a city
  country = _pick(rng, sorted(CAPITALS))
  is_city = rng.random() < 0.5
  name = CAPITALS[country] if is_city else country
  kind = "city" if is_city == truth else "country"
  return f"{name} is a {kind}."


def _animal_class(rng, truth: bool) -> str:
  animal, cls = _table_fact(rng, ANIMAL_CLASS, ANIMAL_CLASSES, truth)
  if rng.random() < 0.5:
    return f"The {animal.split(' ', 1)[1]} is {cls}."
  return f"{_cap(animal)} is {cls}."


def make_statement(family: str, rng: np.random.Generator, truth: bool) -> str:
  easy = {"digit_sum": _digit_sum, "colour": _colour, "opposite": _opposite,
          "category": _category, "size": _size, "continent": _continent, "place": _place,
          "animal_class": _animal_class,
          # the comparison half of `negation` alone: true and false statements have the
          # same form, so no surface cue gives the label away (in `negation` the capital
          # half runs out of distinct false statements and is mostly true)
          # (issue 42's review: it does not: the first number is the smaller one
          # exactly when the statement is true; `cf_negated_comparison` is cue-free)
          "negated_comparison": lambda r, t: "{} is not larger than {}.".format(
              *_comparison_pair(r, not t)),
          "cf_comparison": lambda r, t: _cf_comparison(r, t, False),
          "cf_negated_comparison": lambda r, t: _cf_comparison(r, t, True),
          "cf_size": _cf_size}
  if family in easy:
    return easy[family](rng, truth)
  if family == "arithmetic":
    return _arithmetic(rng, truth)
  if family == "comparison":
    a, b = _comparison_pair(rng, truth)
    return f"{a} is larger than {b}."
  if family == "capitals":
    country, city = _capital_pair(rng, truth)
    if rng.random() < 0.5:
      return f"The capital of {country} is {city}."
    return f"{city} is the capital of {country}."
  if family == "negation":
    return _negation(rng, truth)
  if family == "translation":
    return _translation(rng, truth)
  raise ValueError(f"unknown statement family {family!r}; known: {', '.join(ALL_FAMILIES)}")


def generate(families=FAMILIES, n_per_family: int = 100, seed: int = 0,
             exclude=()) -> StatementSet:
  """`n_per_family` distinct statements per family (even), exactly half of them true;
  none of them in `exclude` (a screening set kept apart from the study's statements)."""
  if n_per_family < 2 or n_per_family % 2:
    raise ValueError(f"n_per_family={n_per_family} must be an even number >= 2")
  statements, labels, fams = [], [], []
  for fi, fam in enumerate(families):
    # One rng stream per family, keyed by its place in ALL_FAMILIES (the original five
    # keep the streams they had), so a family's statements do not depend on the others.
    rng = np.random.default_rng([seed, ALL_FAMILIES.index(fam) if fam in ALL_FAMILIES
                                 else fi])
    seen = set(exclude)
    for truth in (True, False):
      tries = 0
      count = 0
      while count < n_per_family // 2:
        s = make_statement(fam, rng, truth)
        tries += 1
        if tries > 200 * n_per_family:
          raise ValueError(f"family {fam!r} cannot give {n_per_family} distinct statements")
        if s in seen:
          continue
        seen.add(s)
        statements.append(s)
        labels.append(int(truth))
        fams.append(fam)
        count += 1
  order = np.random.default_rng([seed, 999]).permutation(len(statements))
  return StatementSet([statements[i] for i in order], np.asarray(labels)[order],
                      [fams[i] for i in order])


def family_examples(families, shots: int, exclude=(), seed: int = 2):
  """`shots` answered examples (statement, truth) from the families' own generators for a
  few-shot prefix: alternately true and false, none of them in `exclude` (the study's
  and the screen's statements), drawn round-robin over the families."""
  if shots % 2:
    raise ValueError(f"shots={shots} must be even for family examples (half true)")
  if shots == 0:
    return ()
  k = 2 * -(-shots // (2 * len(families)))
  ex = generate(tuple(families), k, seed, exclude)
  fams = np.array(ex.families)
  by = {(f, t): [s for s, ff, y in zip(ex.statements, fams, ex.labels) if ff == f and y == t]
        for f in families for t in (1, 0)}
  out = []
  i = 0
  while len(out) < shots:
    f = families[(i // 2) % len(families)]
    t = 1 - i % 2
    out.append((by[(f, t)][i // (2 * len(families))], bool(t)))
    i += 1
  return tuple(out)


_LABELS = {"1": 1, "0": 0, "true": 1, "false": 0, "1.0": 1, "0.0": 0}


def load_csv(path: str, family: str | None = None) -> StatementSet:
  """A `statement,label` CSV (geometry-of-truth layout; extra columns are ignored)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"statement CSV {path!r} does not exist")
  with open(path, newline="", encoding="utf-8") as f:
    reader = csv.DictReader(f)
    cols = reader.fieldnames or []
    missing = [c for c in ("statement", "label") if c not in cols]
    if missing:
      raise ValueError(f"{path}: missing column(s) {missing}; found {cols}")
    statements, labels = [], []
    for i, row in enumerate(reader):
      lab = _LABELS.get(str(row["label"]).strip().lower())
      if lab is None:
        raise ValueError(f"{path}: row {i + 2} has label {row['label']!r}; expected 1/0 "
                         "or true/false")
      if not row["statement"].strip():
        raise ValueError(f"{path}: row {i + 2} has an empty statement")
      statements.append(row["statement"].strip())
      labels.append(lab)
  if not statements:
    raise ValueError(f"{path}: no statements")
  fam = family or os.path.splitext(os.path.basename(path))[0]
  return StatementSet(statements, np.asarray(labels), [fam] * len(statements))


def concat(sets) -> StatementSet:
  return StatementSet([s for x in sets for s in x.statements],
                      np.concatenate([x.labels for x in sets]),
                      [f for x in sets for f in x.families])

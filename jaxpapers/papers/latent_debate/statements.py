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


def make_statement(family: str, rng: np.random.Generator, truth: bool) -> str:
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
  raise ValueError(f"unknown statement family {family!r}; known: {', '.join(FAMILIES)}")


def generate(families=FAMILIES, n_per_family: int = 100, seed: int = 0) -> StatementSet:
  """`n_per_family` distinct statements per family (even), exactly half of them true."""
  if n_per_family < 2 or n_per_family % 2:
    raise ValueError(f"n_per_family={n_per_family} must be an even number >= 2")
  statements, labels, fams = [], [], []
  for fi, fam in enumerate(families):
    rng = np.random.default_rng([seed, fi])
    seen = set()
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

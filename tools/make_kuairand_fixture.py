#!/usr/bin/env python3
"""make_kuairand_fixture.py — writes a synthetic dataset in the KuaiRand file layout.

Files (the real names and column layout of KuaiRand-Pure / 1K / 27K):
  log_standard_4_08_to_4_21_<v>.csv, log_standard_4_22_to_5_08_<v>.csv
      (27k: each split into _part1.csv / _part2.csv, the first and second half of its rows
      in time order, as in the real release where both parts hold nearly every user)
  user_features_<v>.csv
so `hstu preprocess` / DatasetArgs.dataset_name = 'kuairand-<v>' read it like the real data.

The one decision that shapes it: the engagement flags are drawn from a planted model that a
ranking model can learn from exactly the inputs hstu gives it (item id, the user's history, the
contextual user features), so an acceptance run shows AUC well above 0.5 on every frequent task:
  - items have a category, a popularity (Zipf) and a latent quality;
  - users have an activity degree and social ranges (the contextual features), each shifting
    their engagement rates, and a few preferred categories that drift slowly over time (only
    the recent history reveals the current ones);
  - P(click) rises with item quality, popularity and a preferred category; like / follow /
    comment / forward / profile_enter are conditional on a click, long_view on click and
    quality, hate on a non-preferred low-quality item.
Deterministic by --seed (Python's random.Random; no other dependency than the standard library).

Example:
  python3 tools/make_kuairand_fixture.py --out /tmp/kuairand --variant 1k --users 300
"""

import argparse
import bisect
import csv
import math
import os
import random

LOG_HEADER = [
    "user_id", "video_id", "date", "hourmin", "time_ms", "is_click", "is_like", "is_follow",
    "is_comment", "is_forward", "is_hate", "long_view", "play_time_ms", "duration_ms",
    "profile_stay_time", "comment_stay_time", "is_profile_enter", "is_rand", "tab",
]
FEATURE_HEADER = [
    "user_id", "user_active_degree", "is_lowactive_period", "is_live_streamer", "is_video_author",
    "follow_user_num", "follow_user_num_range", "fans_user_num", "fans_user_num_range",
    "friend_user_num", "friend_user_num_range", "register_days", "register_days_range",
] + ["onehot_feat%d" % i for i in range(18)]

# Contextual values (as in the real files; the range strings hold commas, so they are quoted)
# with an engagement shift per value.
ACTIVE_DEGREES = [("full_active", 0.6), ("high_active", 0.3), ("middle_active", -0.2),
                  ("UNKNOWN", -0.6)]
FOLLOW_RANGES = [("0", -0.5), ("(0,10]", -0.2), ("(10,50]", 0.0), ("(50,100]", 0.2),
                 ("(100,150]", 0.4), ("(150,250]", 0.6), ("(250,500]", 0.8), ("500+", 1.0)]
FANS_RANGES = [("0", -0.3), ("[1,10)", 0.0), ("[10,100)", 0.3), ("[100,1k)", 0.6),
               ("[1k,5k)", 0.9)]
FRIEND_RANGES = [("0", -0.3), ("[1,5)", 0.0), ("[5,30)", 0.3), ("[30,60)", 0.5),
                 ("[60,120)", 0.7), ("250+", 0.9)]
REGISTER_RANGES = [("15-30", -0.4), ("31-60", -0.2), ("61-90", 0.0), ("91-180", 0.1),
                   ("181-365", 0.2), ("366-730", 0.3), ("730+", 0.4)]

# 2022-04-08 00:00:00 in UTC+8 (KuaiRand's local time) as Unix ms; the logs span 31 days.
START_MS = 1649347200000
DAY_MS = 86_400_000
NUM_DAYS = 31
PERIOD2_FIRST_DAY = 14  # 2022-04-22


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def date_fields(ms):
    """(date YYYYMMDD, hourmin HHMM) of a Unix ms time in UTC+8."""
    day = (ms - START_MS) // DAY_MS
    month, dom = (4, 8 + day) if day < 23 else (5, day - 22)
    minute = (ms - START_MS) % DAY_MS // 60_000
    return 2022 * 10000 + month * 100 + dom, (minute // 60) * 100 + minute % 60


class Catalogue:
    def __init__(self, rng, num_items, num_categories):
        self.category = [rng.randrange(num_categories) for _ in range(num_items)]
        self.quality = [rng.gauss(0.0, 1.0) for _ in range(num_items)]
        self.duration_ms = [int(rng.lognormvariate(10.3, 0.6)) for _ in range(num_items)]
        ranks = list(range(num_items))
        rng.shuffle(ranks)
        weight = [1.0 / (r + 1) ** 0.9 for r in ranks]  # Zipf popularity
        self.log_pop = [math.log(w * num_items) for w in weight]
        self.ids = rng.sample(range(1, 50 * num_items), num_items)  # raw video ids
        # Cumulative weights, globally and per category, for weighted draws.
        self.cum = list(_cumulative(weight))
        self.by_cat = [[] for _ in range(num_categories)]
        for i, c in enumerate(self.category):
            self.by_cat[c].append(i)
        self.cat_cum = [list(_cumulative(weight[i] for i in items)) for items in self.by_cat]

    def draw(self, rng, category=None):
        if category is None or not self.by_cat[category]:
            return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])
        cum = self.cat_cum[category]
        return self.by_cat[category][bisect.bisect_left(cum, rng.random() * cum[-1])]


def _cumulative(values):
    total = 0.0
    for v in values:
        total += v
        yield total


def pick(rng, table):
    return rng.randrange(len(table))


def make_user(rng, args, uid, catalogue_categories):
    u = {
        "id": uid,
        "active": pick(rng, ACTIVE_DEGREES),
        "follow": pick(rng, FOLLOW_RANGES),
        "fans": pick(rng, FANS_RANGES),
        "friend": pick(rng, FRIEND_RANGES),
        "register": pick(rng, REGISTER_RANGES),
        "prefs": rng.sample(range(catalogue_categories), 3),
    }
    u["click_bias"] = ACTIVE_DEGREES[u["active"]][1] + REGISTER_RANGES[u["register"]][1]
    u["social_bias"] = (FOLLOW_RANGES[u["follow"]][1] + FANS_RANGES[u["fans"]][1] +
                        FRIEND_RANGES[u["friend"]][1])
    mean = args.mean_events * math.exp(0.5 * ACTIVE_DEGREES[u["active"]][1])
    u["num_events"] = max(args.min_events, min(args.max_events,
                                               int(rng.lognormvariate(math.log(mean), 0.5))))
    # Most users span both periods; some only the first or only the second (kept by hstu).
    r = rng.random()
    u["days"] = (0, PERIOD2_FIRST_DAY) if r < 0.05 else \
        (PERIOD2_FIRST_DAY, NUM_DAYS) if r < 0.10 else (0, NUM_DAYS)
    return u


def event_times(rng, user):
    """Sorted ms times: sessions spread over the user's days, events ~8 s apart in a session."""
    n = user["num_events"]
    first, last = user["days"]
    times = []
    while len(times) < n:
        t = START_MS + rng.randrange(first * DAY_MS, last * DAY_MS - 3_600_000)
        for _ in range(min(n - len(times), rng.randint(5, 60))):
            times.append(t)
            t += int(rng.expovariate(1.0 / 8000.0))  # same-second neighbours happen
    times.sort()
    return times


def user_events(rng, args, user, cat):
    """Rows (time order) of one user's standard log."""
    rows = []
    prefs = list(user["prefs"])
    for t in event_times(rng, user):
        if rng.random() < 0.002:  # slow drift: the recent history tells the current taste
            prefs[rng.randrange(len(prefs))] = rng.randrange(args.categories)
        item = cat.draw(rng, rng.choice(prefs) if rng.random() < 0.55 else None)
        liked_cat = cat.category[item] in prefs
        q = cat.quality[item]
        z = -1.9 + 0.9 * q + 1.4 * liked_cat + 0.25 * cat.log_pop[item] + user["click_bias"]
        click = rng.random() < sigmoid(z)
        social = user["social_bias"]
        like = click and rng.random() < sigmoid(-3.2 + 0.8 * q + 0.8 * liked_cat + 0.6 * social)
        follow = click and rng.random() < sigmoid(-5.5 + 0.5 * q + 0.8 * social)
        comment = click and rng.random() < sigmoid(-4.5 + 0.4 * q + 0.9 * social)
        forward = click and rng.random() < sigmoid(-5.0 + 0.6 * q + 0.7 * social)
        hate = (not liked_cat) and rng.random() < sigmoid(-5.0 - 1.2 * q)
        long_view = rng.random() < sigmoid(-1.5 + 1.8 * click + 0.7 * q + 0.6 * liked_cat)
        profile = click and rng.random() < sigmoid(-4.0 + 1.0 * like + 0.6 * social)
        duration = cat.duration_ms[item]
        play = int(duration * (0.6 + 0.8 * rng.random())) if long_view else \
            int(duration * 0.3 * rng.random())
        date, hourmin = date_fields(t)
        rows.append([
            user["id"], cat.ids[item], date, hourmin, t, int(click), int(like), int(follow),
            int(comment), int(forward), int(hate), int(long_view), play, duration,
            rng.randint(1000, 60000) if profile else 0, rng.randint(1000, 90000) if comment else 0,
            int(profile), 0, rng.choice((0, 1, 1, 1, 2, 4)),
        ])
    return rows


def feature_row(rng, user):
    def num(idx):  # a raw count consistent with its range index
        return idx * 10 + rng.randrange(10)

    return [
        user["id"], ACTIVE_DEGREES[user["active"]][0], int(user["active"] == 3),
        int(rng.random() < 0.02), int(rng.random() < 0.2),
        num(user["follow"]), FOLLOW_RANGES[user["follow"]][0],
        num(user["fans"]), FANS_RANGES[user["fans"]][0],
        num(user["friend"]), FRIEND_RANGES[user["friend"]][0],
        30 * (user["register"] + 1), REGISTER_RANGES[user["register"]][0],
    ] + [rng.randrange(8) for _ in range(18)]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder to write the CSV files into")
    p.add_argument("--variant", choices=("pure", "1k", "27k"), default="1k")
    p.add_argument("--users", type=int, default=300)
    p.add_argument("--items", type=int, default=3000)
    p.add_argument("--categories", type=int, default=24)
    p.add_argument("--mean-events", type=int, default=1500)
    p.add_argument("--min-events", type=int, default=120)
    p.add_argument("--max-events", type=int, default=8000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    cat = Catalogue(rng, args.items, args.categories)
    users = [make_user(rng, args, uid, args.categories) for uid in range(args.users)]

    periods = ([], [])
    counts = [0] * 8
    total = 0
    for user in users:
        for row in user_events(rng, args, user, cat):
            periods[(row[4] - START_MS) // DAY_MS >= PERIOD2_FIRST_DAY].append(row)
            for i, col in enumerate((5, 6, 7, 8, 9, 10, 11, 16)):
                counts[i] += row[col]
            total += 1

    os.makedirs(args.out, exist_ok=True)
    v = args.variant
    for name, rows in (("log_standard_4_08_to_4_21_", periods[0]),
                       ("log_standard_4_22_to_5_08_", periods[1])):
        if v == "27k":  # halves of the period in time order
            rows = sorted(rows, key=lambda r: r[4])
            half = len(rows) // 2
            write_csv(os.path.join(args.out, name + v + "_part1.csv"), LOG_HEADER, rows[:half])
            write_csv(os.path.join(args.out, name + v + "_part2.csv"), LOG_HEADER, rows[half:])
        else:
            write_csv(os.path.join(args.out, name + v + ".csv"), LOG_HEADER, rows)
    write_csv(os.path.join(args.out, "user_features_%s.csv" % v), FEATURE_HEADER,
              [feature_row(rng, u) for u in users])
    names = ("click", "like", "follow", "comment", "forward", "hate", "long_view", "profile")
    rates = ", ".join("%s %.3f" % (n, c / max(total, 1)) for n, c in zip(names, counts))
    print("wrote %d users, %d events (%d + %d) to %s; positive rates: %s" %
          (len(users), total, len(periods[0]), len(periods[1]), args.out, rates))


if __name__ == "__main__":
    main()

"""Exercise 4: shared-token residuals of four objectives in three settings.

Run from the repository root:

    python exercises/ex4_residuals.py

Every setting is one group of 4 rollouts, rewards 1, 0, 1, 0, whose first
completion token is shared (same history, same log pi_new, same log pi_old in
all four rollouts). The residual is loss.first_token_residual:
|sum_i c_i| / sum_i |c_i| over the 4 copies of that token; 0 means the
token cancels.

  A  on-policy (pi_old = pi_new), lengths 2, 3, 4, 5, clip=sym (eps 0.2)
  B  off-policy: every other token has a random log-ratio in [-0.3, 0.3],
     the shared token has ratio e^0.1 = 1.11; lengths all 4; clip=sym (eps 0.2)
  C  off-policy as B, but the shared token has ratio e^0.3 = 1.35;
     lengths all 4; clip=higher (eps_low 0.2, eps_high 0.28)

dfpo_orth is printed as a reference row.
"""

import _helpers as H

REWARDS = (1.0, 0.0, 1.0, 0.0)
SETTINGS = {
    "A": dict(lengths=(2, 3, 4, 5), off_policy=False, shared_logratio=0.0,
              clip="sym", kw=dict(clip_low=0.2)),
    "B": dict(lengths=(4, 4, 4, 4), off_policy=True, shared_logratio=0.1,
              clip="sym", kw=dict(clip_low=0.2)),
    "C": dict(lengths=(4, 4, 4, 4), off_policy=True, shared_logratio=0.3,
              clip="higher", kw=dict(clip_low=0.2, clip_high=0.28)),
}
LOSSES = ("grpo", "dr_grpo", "dapo", "gspo")
REFERENCE = ("dfpo_orth",)


def residual_table(losses=LOSSES + REFERENCE):
    """{setting: {loss: residual}}."""
    table = {}
    for name, s in SETTINGS.items():
        batch = H.shared_group(s["lengths"], REWARDS, seed=0, off_policy=s["off_policy"],
                               shared_logratio=s["shared_logratio"])
        table[name] = {loss: H.residual(loss, batch, s["clip"], **s["kw"]) for loss in losses}
    return table


def main():
    table = residual_table()
    losses = list(next(iter(table.values())))
    print("residual   " + "".join(f"{loss:>11}" for loss in losses))
    for name, row in table.items():
        print(f"setting {name}  " + "".join(f"{row[loss]:>11.4f}" for loss in losses))
    print("(0.0000 = the shared token cancels)")


if __name__ == "__main__":
    main()

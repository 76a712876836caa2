"""checks.py: the rules of the lab's flags, lent to train.py's command line.

What it teaches: the catalogue's records decide what a combination of flags means.
Which --loss, --adv, --agg and --kl_loss_type exist (--adv=auto: each record's own
estimator, joined to loss.OWN_ADV), which switches an objective allows and which
settings it needs (--loss=dro needs --dro_beta) are the records' (objectives.py,
estimators.py, engines.py). plumbing/config.py knows
none of them: importing the lab registers them there (its CHOICES, IMPLIED and
CHECKS), so the run's plumbing sits below the lab and never imports it.
"""

from lab import engines, estimators, objectives
from plumbing import config
from plumbing.errors import CliError

OBJECTIVES = objectives.OBJECTIVES


def check_names(cfg):
    """--loss, --adv, --agg and --kl_loss_type name what the catalogue holds."""
    try:
        objectives.objective(cfg.loss)
        estimators.estimator(cfg.adv)
    except ValueError as e:
        raise CliError(str(e)) from None
    if cfg.agg != "auto" and cfg.agg not in objectives.AGGS:
        raise CliError(f"unknown aggregation {cfg.agg!r}; choose auto or one of "
                       f"{', '.join(objectives.AGGS)}")
    if cfg.kl_loss_type not in engines.KL_TYPES:
        raise CliError(f"unknown kl_loss_type {cfg.kl_loss_type!r}; choose one of "
                       f"{', '.join(engines.KL_TYPES)}")


def check_objective(cfg):
    """The switches the objective's record allows, and the settings it needs."""
    obj = objectives.objective(cfg.loss)
    if cfg.agg != "auto" and obj.own_agg:
        raise CliError(f"--loss={cfg.loss} defines its own aggregation; leave --agg out")
    if cfg.kl_loss_type != "k3" and not cfg.beta:
        raise CliError("--kl_loss_type picks --beta's estimator; it needs --beta > 0")
    for name in ("dro_beta",):  # settings that belong to one objective
        if getattr(cfg, name) < 0 or (name in obj.needs) != (getattr(cfg, name) > 0):
            owners = [o for o in OBJECTIVES.values() if name in o.needs]
            raise CliError(f"--loss={' / '.join(o.name for o in owners)} needs --{name} > 0 "
                           f"({obj.needs.get(name) or owners[0].needs[name]}), "
                           f"and --{name} applies to it only")
    if cfg.top_entropy_quantile < 1 and obj.sequence_ratio:
        raise CliError(f"--top_entropy_quantile selects tokens; --loss={cfg.loss} has one ratio "
                       f"per sequence")
    if cfg.group_size < 2 and cfg.adv != "positive_only":
        raise CliError(f"--group_size={cfg.group_size}: group advantages need at least 2 "
                       f"completions per prompt")
    if obj.clip == "none" and cfg.clip != "none":
        raise CliError(f"--loss={cfg.loss} has no ratio clip; leave --clip out (or pass "
                       f"--clip=none)")
    if cfg.dual_clip and not obj.dual_clip:
        allowed = [o.name for o in OBJECTIVES.values() if o.dual_clip]
        raise CliError(f"--dual_clip applies to the token PPO losses {', '.join(allowed)}, "
                       f"not to --loss={cfg.loss}")


def implied(values):
    """An objective without a ratio clip runs with --clip=none unless --clip is given
    (and then refused by check_objective)."""
    obj = OBJECTIVES.get(values.get("loss", config.Config.loss))
    return {"clip": "none"} if obj is not None and obj.clip == "none" else {}


config.CHOICES.update(loss=OBJECTIVES, adv=estimators.ESTIMATORS, agg=objectives.AGGS,
                      kl_loss_type=engines.KL_TYPES)
config.IMPLIED.append(implied)
config.CHECKS.extend([check_names, check_objective])

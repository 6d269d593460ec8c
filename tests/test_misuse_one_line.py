"""Library misuse named in one line by jaxsel, not by a strategy's or JAX's internals (issue
60 item 11): as_optax given another strategy's state; a state on other devices than the
train step's mesh."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import softmax_batches, softmax_loss, softmax_params
from jaxsel.core.parallel import LayoutError


def stacked(tree, n=8):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), tree)


def update_with(tx, opt_state, params):
    batch = softmax_batches(1)[0]
    batch = jax.tree.map(lambda x: x.reshape((8, -1) + x.shape[1:]), batch)

    def replica(params, opt_state, batch):
        return tx.update(jax.grad(softmax_loss)(params, batch), opt_state, params)

    return jax.vmap(replica, axis_name="data")(stacked(params), stacked(opt_state), batch)


@pytest.mark.parametrize("other", [lambda p: jaxsel.as_optax(jaxsel.LocalSGD(period=2), optax.sgd(0.1)).init(p),
                                   lambda p: optax.sgd(0.1).init(p)])
def test_as_optax_given_another_strategy_s_state_says_so(other):
    params = softmax_params()
    tx = jaxsel.as_optax(jaxsel.SelSync(), optax.sgd(0.1))
    with pytest.raises(TypeError, match=r"jaxsel.as_optax\(selsync\): the optimizer state.* pass the state "
                                        r"tx.init\(params\) made"):
        update_with(tx, other(params), params)
    update_with(tx, tx.init(params), params)   # its own state still trains


def test_a_state_on_other_devices_than_the_step_s_mesh_is_one_line():
    opt, strategy = optax.sgd(0.1), jaxsel.BSP()
    state = jaxsel.init_state(softmax_params(), opt, strategy, jaxsel.data_mesh(replicas=16), replicas=16)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, jaxsel.data_mesh(replicas=4))
    batch = {k: np.concatenate([v, v]) for k, v in softmax_batches(1, b=2)[0].items()}
    with pytest.raises(LayoutError, match=r"the state lives on 8 device\(s\) \(its mesh \{'data': 8\}\), the train "
                                          r"step runs on 4"):
        step(state, batch)

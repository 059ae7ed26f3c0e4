"""Optimizers: a two-step Adam pinned bit for bit, SGD, L2, clipping, skipped params."""

import math

import numpy as np

from tapescope.core import Tape, ops, optim


def _quad(tape, w, target):
    d = w - tape.const(target)
    return ops.sum(d * d)


def test_two_step_adam_bit_for_bit_against_hand_computation():
    w0 = np.array([0.5, -1.25, 2.0])
    target = np.array([1.0, 1.0, -1.0])
    tape = Tape()
    w = tape.param(w0)
    m0 = tape.mark()
    opt = optim.Adam(tape, lr=0.1)
    opt.add(w)
    # by hand, in python floats (the same IEEE double operations, in the documented order)
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.1
    hw, hm, hv = list(w0), [0.0] * 3, [0.0] * 3
    for t in (1, 2):
        tape.reset_to(m0)
        tape.backward(_quad(tape, w, target))
        opt.step()
        lr_t = lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
        for i in range(3):
            g = (hw[i] - target[i]) + (hw[i] - target[i])  # d(d*d) = g*d + g*d with g = 1
            hm[i] = b1 * hm[i] + (1.0 - b1) * g
            hv[i] = b2 * hv[i] + (1.0 - b2) * (g * g)
            hw[i] = hw[i] - lr_t * (hm[i] / (math.sqrt(hv[i]) + eps))
        assert list(tape.value(w)) == hw, t
    assert opt.t == 2


def test_sgd_with_l2_and_untouched_param_skipped():
    tape = Tape()
    w = tape.param(np.array([1.0, 2.0]))
    unused = tape.param(np.array([5.0]))
    opt = optim.SGD(tape, lr=0.5)
    opt.add(w, l2=0.1)
    opt.add(unused, l2=0.1)
    tape.backward(ops.sum(w))
    opt.step()
    assert list(tape.value(w)) == [1.0 - 0.5 * (1.0 + 0.1 * 1.0), 2.0 - 0.5 * (1.0 + 0.1 * 2.0)]
    assert list(tape.value(unused)) == [5.0]  # never reached by backward: not decayed


def test_global_norm_clipping_scales_every_gradient():
    tape = Tape()
    a = tape.param(np.array([3.0]))
    b = tape.param(np.array([4.0]))
    opt = optim.SGD(tape, lr=1.0, clip=1.0)
    opt.add(a)
    opt.add(b)
    tape.backward(ops.sum(a * a) + ops.sum(b * b))  # grads 6 and 8, norm 10
    grads = [g for _, g in opt.grads()]
    assert grads[0][0] == 6.0 * (1.0 / 10.0) and grads[1][0] == 8.0 * (1.0 / 10.0)


def test_workloads_train_and_loss_falls():
    from tapescope.core import workloads

    for name, steps in (("mlp", 40), ("transformer", 40)):
        wl = workloads.get(name)
        losses = wl.train(steps)
        assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), name
        assert len(wl.tape) == len(wl.tape)  # same structure every episode
        n = len(wl.tape)
        wl.record(steps)
        assert len(wl.tape) == n

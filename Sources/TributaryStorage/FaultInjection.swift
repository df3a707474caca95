import Synchronization

/// Test-only: makes a chosen storage call fail, so tests can prove that every failure leaves the
/// replica as it was before the transaction. Package API: apps cannot reach it.
///
/// The plan counts calls of the chosen kinds and, from the `failAt`-th one on (once, or every time
/// when `persistent`), returns `resultCode` instead of calling LMDB. A failed commit aborts the
/// transaction, exactly as a real failed commit leaves nothing behind.
package struct StorageFaultPlan: Sendable {
    /// The storage calls a plan can fail.
    package enum Operation: Sendable, Hashable, CaseIterable {
        case transactionBegin, get, put, delete, cursorGet, commit
    }
    package var operations: Set<Operation>
    package var failAt: Int
    package var resultCode: Int32
    package var persistent: Bool

    package init(operations: Set<Operation>, failAt: Int, resultCode: Int32, persistent: Bool = false) {
        self.operations = operations
        self.failAt = failAt
        self.resultCode = resultCode
        self.persistent = persistent
    }
}

final class FaultInjector: Sendable {
    private struct State {
        var plan: StorageFaultPlan?
        var calls = 0
        var failures = 0
    }
    private let armed = Atomic<Bool>(false)
    private let state = Mutex(State())

    func arm(_ plan: StorageFaultPlan?) {
        state.withLock { $0 = State(plan: plan) }
        armed.store(plan != nil, ordering: .releasing)
    }

    /// The number of matching calls seen and the number failed since the plan was armed.
    var counts: (calls: Int, failures: Int) { state.withLock { ($0.calls, $0.failures) } }

    @inline(__always)
    func check(_ operation: StorageFaultPlan.Operation) -> Int32? {
        guard armed.load(ordering: .acquiring) else { return nil }
        return state.withLock { state -> Int32? in
            guard let plan = state.plan, plan.operations.contains(operation) else { return nil }
            state.calls += 1
            let fails = plan.persistent ? state.calls >= plan.failAt : state.calls == plan.failAt
            if fails { state.failures += 1 }
            return fails ? plan.resultCode : nil
        }
    }
}

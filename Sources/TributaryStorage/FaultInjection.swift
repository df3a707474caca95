import Synchronization

/// Test-only: makes a chosen storage call fail, so tests can prove that every failure leaves the
/// replica as it was before the transaction. Not API: the underscore says so.
///
/// The plan counts calls of the chosen kinds and, from the `failAt`-th one on (once, or every time
/// when `persistent`), returns `resultCode` instead of calling LMDB. A failed commit aborts the
/// transaction, exactly as a real failed commit leaves nothing behind.
public struct _StorageFaultPlan: Sendable {
    /// The storage calls a plan can fail.
    public enum Operation: Sendable, Hashable, CaseIterable {
        case transactionBegin, get, put, delete, cursorGet, commit
    }
    public var operations: Set<Operation>
    public var failAt: Int
    public var resultCode: Int32
    public var persistent: Bool

    public init(operations: Set<Operation>, failAt: Int, resultCode: Int32, persistent: Bool = false) {
        self.operations = operations
        self.failAt = failAt
        self.resultCode = resultCode
        self.persistent = persistent
    }
}

final class FaultInjector: Sendable {
    private struct State {
        var plan: _StorageFaultPlan?
        var calls = 0
        var failures = 0
    }
    private let armed = Atomic<Bool>(false)
    private let state = Mutex(State())

    func arm(_ plan: _StorageFaultPlan?) {
        state.withLock { $0 = State(plan: plan) }
        armed.store(plan != nil, ordering: .releasing)
    }

    /// The number of matching calls seen and the number failed since the plan was armed.
    var counts: (calls: Int, failures: Int) { state.withLock { ($0.calls, $0.failures) } }

    @inline(__always)
    func check(_ operation: _StorageFaultPlan.Operation) -> Int32? {
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

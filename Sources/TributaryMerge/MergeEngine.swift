public import TributaryModel

/// What a changeset carries besides its instructions: enough to merge each instruction.
public struct ChangesetInfo: Hashable, Sendable {
    /// The origin dot: what element ids derive from, and what records name erasures by.
    public var dot: Dot
    public var stamp: Stamp
    /// The causal context (by causal dots) and the dots it covers besides the vector.
    public var context: VersionVector
    public var contextExtras: [Dot]
    /// The shape each property it writes had in its writer's schema (rule 8).
    public var shapeNotes: ShapeNotes

    public init(
        dot: Dot, stamp: Stamp, context: VersionVector, contextExtras: [Dot] = [], shapeNotes: ShapeNotes = ShapeNotes()
    ) {
        self.dot = dot
        self.stamp = stamp
        self.context = context
        self.contextExtras = contextExtras
        self.shapeNotes = shapeNotes
    }

    public init(_ changeset: Changeset) {
        self.init(
            dot: changeset.dot, stamp: changeset.stamp, context: changeset.context,
            contextExtras: changeset.contextExtras, shapeNotes: changeset.shapeNotes)
    }

    /// Whether the changeset's writer had seen the changeset with origin dot `dot` (or is it). Earlier changesets of
    /// the same origin always count as seen; others are looked up by their causal dot, which `causal` resolves (a
    /// relay may have adopted them).
    ///
    /// - Throws: what the resolver's record source throws when it cannot read the adoptions.
    public func covers(_ dot: Dot, causal: CausalResolver) throws -> Bool {
        if dot == self.dot { return true }
        if dot.origin == self.dot.origin { return dot.sequence < self.dot.sequence }
        // The writer may have seen it before a relay adopted it (by its origin dot) or after (by the relay's dot).
        if context.includes(dot) || contextExtras.contains(dot) { return true }
        // Any of its adoptions: one changeset adopted by two relays is seen through either. A writer's context names
        // only what it integrated, and a replica integrates all of that before the writer's changeset, so every
        // replica knows the copy the writer saw when it asks, and all of them answer alike.
        return try causal.anyCausalDot(of: dot) { context.includes($0) || contextExtras.contains($0) }
    }
}

/// Resolves a changeset's origin dot to its causal dots: the relay dots it was adopted as.
public struct CausalResolver {
    let adopted: [Dot: [Dot]]
    /// Where adoptions already stored are looked up. An existential, not a closure over it: a resolver is made for
    /// every instruction applied, and a closure would allocate its context each time.
    let source: (any RecordSource)?

    public init(adopted: [Dot: [Dot]] = [:], source: (any RecordSource)? = nil) {
        self.adopted = adopted
        self.source = source
    }

    /// Whether one of the relay dots the changeset with origin dot `dot` was adopted as passes `test`: those
    /// recorded in the working set, then those stored.
    ///
    /// - Throws: what the record source throws when it cannot read the stored ones.
    public func anyCausalDot(of dot: Dot, _ test: (Dot) -> Bool) throws -> Bool {
        if let copies = adopted[dot], copies.contains(where: test) { return true }
        return try source?.causalDots(ofOrigin: dot).contains(where: test) ?? false
    }
}

/// The merge engine: applies changesets to object records by the rules of docs/MergeSemantics.md, deterministically.
///
/// It is pure: it reads and writes records only through a ``WorkingSet`` and performs no I/O, so it runs the
/// same on an LMDB replica, in the simulator, and in tests. Local writes, replay and remote integration all go
/// through it, which is why replaying the log rebuilds exactly the live state.
///
/// Any two replicas that apply the same set of changesets, each in a causal order, hold the same records.
public enum MergeEngine {
    /// Applies every instruction of `changeset`, in order.
    ///
    /// - Throws: ``MergeError`` when the changeset conflicts with the schema or is malformed; the working set
    ///   may then hold part of the changeset, so the caller discards it.
    public static func apply(_ changeset: Changeset, to state: inout WorkingSet) throws {
        if let relay = changeset.relay { state.recordAdoption(of: changeset.dot, as: relay) }
        let info = ChangesetInfo(changeset)
        // Only for large changesets: for a small one the reserve costs more than the table's own growth.
        if changeset.instructions.count > 256 { state.reserveCapacity(forMoreRecords: changeset.instructions.count) }
        for (index, instruction) in changeset.instructions.enumerated() {
            try apply(instruction, index: index, of: info, to: &state)
            try state.spillIfNeeded()
        }
    }

    /// Applies one instruction: the `index`-th of the changeset described by `info`.
    ///
    /// - Parameter checkValues: whether to check values against the schema. A local transaction, which checked them
    ///   already with errors that name the caller's mistake, passes `false`; changesets from elsewhere are checked.
    public static func apply(
        _ instruction: Instruction, index: Int, of info: ChangesetInfo, to state: inout WorkingSet,
        checkValues: Bool = true
    ) throws {
        var applier = InstructionApplier(info: info, index: index)
        applier.checkValues = checkValues
        do {
            try applier.apply(instruction, to: &state)
        } catch var error as MergeError {
            error.dot = info.dot
            error.instructionIndex = index
            throw error
        }
    }
}

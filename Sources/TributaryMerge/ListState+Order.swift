public import TributaryModel

extension ListState {
    /// Every slot in list order (Fugue's in-order traversal: left children, the slot, right children; siblings
    /// by stamp, then id). Iterative, so a list of any length cannot overflow the stack.
    ///
    /// Works on arrays, not dictionaries: the slots sorted by id (a parent is found by binary search), and the
    /// children of every parent and side placed in one run each. A list set whole a thousand times keeps ten thousand
    /// slots, and every read of it orders them; hashing each id two or three times took most of that read.
    ///
    /// - Complexity: O(n log n) in the number of slots.
    public func orderedSlots() -> [ElementID] {
        let count = slots.count
        if count == 0 { return [] }
        // Sorted as (id, place) pairs, which move faster than whole slots.
        let unordered = Array(slots.values)
        var places = unordered.indices.map { (id: unordered[$0].id, place: $0) }
        places.sort { $0.id < $1.id }
        let byID = places.map { unordered[$0.place] }
        /// The index in `byID` of the slot with `id`, or `count` (the root) for none.
        func index(of id: ElementID?) -> Int {
            guard let id else { return count }
            var low = 0
            var high = count
            while low < high {
                let middle = (low + high) / 2
                if byID[middle].id < id { low = middle + 1 } else { high = middle }
            }
            // A parent that is missing (it cannot be under causal delivery) is treated as the root, the same way on
            // every replica.
            return low < count && byID[low].id == id ? low : count
        }
        // Each slot under its parent and side, as group `parent * 2 + side` (the root's last): the slots placed by
        // group (a counting sort), then each group's run ordered as siblings are. Most groups hold one slot or none.
        let groupCount = (count + 1) * 2
        var groups = [Int](repeating: 0, count: count)
        // Where each group's run starts in `children`: group g's run is `starts[g] ..< starts[g + 1]`.
        var starts = [Int](repeating: 0, count: groupCount + 1)
        for slot in 0..<count {
            let group = index(of: byID[slot].parent) * 2 + Int(byID[slot].side.rawValue)
            groups[slot] = group
            starts[group + 1] += 1
        }
        for group in 1...groupCount { starts[group] += starts[group - 1] }
        var children = [Int](repeating: 0, count: count)
        var next = starts
        for slot in 0..<count {
            children[next[groups[slot]]] = slot
            next[groups[slot]] += 1
        }
        for group in 0..<groupCount where starts[group + 1] - starts[group] > 1 {
            children[starts[group]..<starts[group + 1]].sort { left, right in
                (byID[left].stamp, byID[left].id) < (byID[right].stamp, byID[right].id)
            }
        }
        // The stack holds slots to expand (a slot's index) and to emit (-1 - index); the root is `count`.
        var result: [ElementID] = []
        result.reserveCapacity(count)
        var stack: [Int] = [count]
        while let step = stack.popLast() {
            if step < 0 {
                result.append(byID[-1 - step].id)
                continue
            }
            // Pushed in reverse: left children first, then the slot, then right children.
            let right = step * 2 + Int(ListAnchor.Side.right.rawValue)
            for position in (starts[right]..<starts[right + 1]).reversed() { stack.append(children[position]) }
            if step < count { stack.append(-1 - step) }
            let left = step * 2 + Int(ListAnchor.Side.left.rawValue)
            for position in (starts[left]..<starts[left + 1]).reversed() { stack.append(children[position]) }
        }
        return result
    }

    /// The live elements in list order.
    public func orderedElements() -> [ListElement] {
        var occupant: [ElementID: ListElement] = [:]
        occupant.reserveCapacity(elements.count)
        for element in elements.values { occupant[element.position] = element }
        if occupant.isEmpty { return [] }
        return orderedSlots().compactMap { occupant[$0] }
    }

    /// The anchor that places a new slot at visible index `index` (0 ... count), by Fugue's rule: right child of
    /// the slot before, unless that slot has right children; then left child of the slot that follows it.
    public func anchor(forInsertionAt index: Int) -> ListAnchor {
        let ordered = orderedSlots()
        var occupied = Set<ElementID>()
        for element in elements.values { occupied.insert(element.position) }
        // The slot of the visible element before the insertion point, and its place in the full order.
        var left: ElementID? = nil
        var leftOrder = -1
        if index > 0 {
            var seen = 0
            for (order, slot) in ordered.enumerated() where occupied.contains(slot) {
                seen += 1
                if seen == index {
                    left = slot
                    leftOrder = order
                    break
                }
            }
        }
        let leftHasRightChildren = slots.values.contains { $0.parent == left && $0.side == .right }
        if !leftHasRightChildren { return ListAnchor(parent: left, side: .right) }
        let next = leftOrder + 1
        guard next < ordered.count else { return ListAnchor(parent: left, side: .right) }
        return ListAnchor(parent: ordered[next], side: .left)
    }
}

/// Where a batch of new elements goes in a list, computed with one pass over the list instead of one per element:
/// for each insert, the anchor ``ListState/anchor(forInsertionAt:)`` gives at the index right after the element
/// before it, as the list is at that moment.
///
/// It holds no reference to the list, so the caller can change the list (apply the inserts) while it plans.
///
/// Each slot may be the left neighbour of at most one insert (which is why this is not public API): a batch places
/// every new element right after the one before it, and each run of new elements right after a different existing
/// element (or at the front). That keeps the plan valid while the inserts land: a run lands between its left
/// neighbour and that neighbour's successor, so it changes no other neighbour's right children or successor. New
/// slots need fresh ids (a dot never used before), as every changeset's are.
///
/// - Complexity: O(n log n) to make, in the number of slots; O(1) for each insert.
package struct ListInsertionPlan: Sendable {
    /// Every slot of the list when the plan was made, in list order, and each one's place in that order.
    private let ordered: [ElementID]
    private let order: [ElementID: Int]
    /// The parents that have right children (by each slot's parent as stored, as ``ListState/anchor(forInsertionAt:)``
    /// reads it), and whether the root has.
    private let parentsWithRightChildren: Set<ElementID>
    private let rootHasRightChildren: Bool

    package init(_ list: ListState) {
        ordered = list.orderedSlots()
        var order: [ElementID: Int] = [:]
        order.reserveCapacity(ordered.count)
        for (index, slot) in ordered.enumerated() { order[slot] = index }
        self.order = order
        var parents = Set<ElementID>()
        var root = false
        for slot in list.slots.values where slot.side == .right {
            if let parent = slot.parent { parents.insert(parent) } else { root = true }
        }
        parentsWithRightChildren = parents
        rootHasRightChildren = root
    }

    /// The anchor that places a new slot right after slot `left` (at the front of the list when `nil`).
    ///
    /// `left` is a slot the list had when the plan was made, or one that an insert this plan anchored created.
    package func anchor(after left: ElementID?) -> ListAnchor {
        guard let left else {
            // At the front: the root's right child, unless the root has some; then the first slot's left child.
            guard rootHasRightChildren, let first = ordered.first else { return ListAnchor(parent: nil, side: .right) }
            return ListAnchor(parent: first, side: .left)
        }
        // A slot without right children, such as one an insert of this plan created (it has no children at all): the
        // new slot goes right of it.
        guard parentsWithRightChildren.contains(left), let place = order[left],
            place + 1 < ordered.count
        else { return ListAnchor(parent: left, side: .right) }
        return ListAnchor(parent: ordered[place + 1], side: .left)
    }
}

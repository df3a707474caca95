public import TributaryModel

extension ListState {
    /// Every slot in list order (Fugue's in-order traversal: left children, the slot, right children; siblings
    /// by stamp, then id). Iterative, so a list of any length cannot overflow the stack.
    ///
    /// - Complexity: O(n log n) in the number of slots.
    public func orderedSlots() -> [ElementID] {
        struct ChildKey: Hashable {
            var parent: ElementID?
            var side: ListAnchor.Side
        }
        var children: [ChildKey: [Slot]] = [:]
        for slot in slots.values {
            // A parent that is missing (it cannot be under causal delivery) is treated as the root, the same
            // way on every replica.
            let parent = slot.parent.flatMap { slots[$0] == nil ? nil : $0 }
            children[ChildKey(parent: parent, side: slot.side), default: []].append(slot)
        }
        for key in Array(children.keys) {
            children[key]!.sort { ($0.stamp, $0.id) < ($1.stamp, $1.id) }
        }
        enum Step {
            case expand(ElementID?)
            case emit(ElementID)
        }
        var result: [ElementID] = []
        result.reserveCapacity(slots.count)
        var stack: [Step] = [.expand(nil)]
        while let step = stack.popLast() {
            switch step {
            case .emit(let id):
                result.append(id)
            case .expand(let node):
                // Pushed in reverse: left children first, then the node, then right children.
                for child in (children[ChildKey(parent: node, side: .right)] ?? []).reversed() {
                    stack.append(.expand(child.id))
                }
                if let node { stack.append(.emit(node)) }
                for child in (children[ChildKey(parent: node, side: .left)] ?? []).reversed() {
                    stack.append(.expand(child.id))
                }
            }
        }
        return result
    }

    /// The live elements in list order.
    public func orderedElements() -> [ListElement] {
        var occupant: [ElementID: ListElement] = [:]
        occupant.reserveCapacity(elements.count)
        for element in elements.values where !element.isErased {
            occupant[element.position] = element
        }
        if occupant.isEmpty { return [] }
        return orderedSlots().compactMap { occupant[$0] }
    }

    /// The anchor that places a new slot at visible index `index` (0 ... count), by Fugue's rule: right child of
    /// the slot before, unless that slot has right children; then left child of the slot that follows it.
    public func anchor(forInsertionAt index: Int) -> ListAnchor {
        let ordered = orderedSlots()
        var occupied = Set<ElementID>()
        for element in elements.values where !element.isErased { occupied.insert(element.position) }
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

import Testing
import TributaryMerge
import TributaryModel

/// ``ListState/orderedSlots()`` orders a list's slots with sorted arrays. Checked against the tree walk it replaced,
/// kept here as the definition (Fugue's in-order traversal over children found by parent and side), on random lists:
/// concurrent siblings, erased and moved elements, slots whose parent is missing, and slots cut off in a cycle.
@Suite struct ListOrderTests {
    /// The definition: children by parent and side in dictionaries, siblings by stamp then id, walked in order.
    static func reference(_ list: ListState) -> [ElementID] {
        struct ChildKey: Hashable {
            var parent: ElementID?
            var side: ListAnchor.Side
        }
        var children: [ChildKey: [Slot]] = [:]
        for slot in list.slots.values {
            let parent = slot.parent.flatMap { list.slots[$0] == nil ? nil : $0 }
            children[ChildKey(parent: parent, side: slot.side), default: []].append(slot)
        }
        for key in Array(children.keys) { children[key]!.sort { ($0.stamp, $0.id) < ($1.stamp, $1.id) } }
        var result: [ElementID] = []
        func walk(_ node: ElementID?) {
            for child in children[ChildKey(parent: node, side: .left)] ?? [] { walk(child.id) }
            if let node { result.append(node) }
            for child in children[ChildKey(parent: node, side: .right)] ?? [] { walk(child.id) }
        }
        walk(nil)
        return result
    }

    @Test("Random lists order as the tree walk orders them", arguments: 0..<40)
    func randomLists(_ seed: UInt64) {
        var builder = ListInsertionPlanTests.Builder(seed: 0x0D0E_0000 + seed)
        builder.build(steps: 20 + Int(seed) * 5)
        let ordered = builder.list.orderedSlots()
        #expect(ordered == Self.reference(builder.list))
        #expect(ordered.count == builder.list.slots.count, "every slot of a list built by inserts is reachable")
        #expect(Set(ordered) == Set(builder.list.slots.keys))
    }

    @Test("A slot whose parent is missing hangs from the root; slots cut off in a cycle are left out")
    func missingParentsAndCycles() {
        var builder = ListInsertionPlanTests.Builder(seed: 0x0D0E_1000)
        builder.build(steps: 60)
        var list = builder.list
        let stamp = builder.stamp()
        // Under a parent no slot has: ordered as a child of the root, on its side.
        let orphan = builder.freshID()
        let missing = ElementID(origin: ReplicaID(rawValue: 9), sequence: 999_999, index: 0)
        list.slots[orphan] = Slot(id: orphan, parent: missing, side: .left, stamp: stamp)
        // Two slots that are each other's parent: the walk from the root never reaches them.
        let (first, second) = (builder.freshID(), builder.freshID())
        list.slots[first] = Slot(id: first, parent: second, side: .right, stamp: stamp)
        list.slots[second] = Slot(id: second, parent: first, side: .left, stamp: stamp)
        let ordered = list.orderedSlots()
        #expect(ordered == Self.reference(list))
        #expect(ordered.contains(orphan))
        #expect(!ordered.contains(first) && !ordered.contains(second))
        #expect(ordered.count == list.slots.count - 2)
    }

    @Test("An empty list has no slots; one slot is the whole order")
    func smallLists() {
        #expect(ListState().orderedSlots().isEmpty)
        var builder = ListInsertionPlanTests.Builder(seed: 1)
        builder.build(steps: 1)
        #expect(builder.list.orderedSlots() == Self.reference(builder.list))
    }

    @Test("A list replaced whole many times: live elements in order among thousands of empty slots")
    func replacedList() {
        var builder = ListInsertionPlanTests.Builder(seed: 0x0D0E_2000)
        var list = ListState()
        for round in 0..<200 {
            // Each round erases the live elements and inserts ten at the front, as setting the whole list does.
            list.elements.removeAll()
            let plan = ListInsertionPlan(list)
            var left: ElementID? = nil
            for index in 0..<10 {
                let anchor = plan.anchor(after: left)
                let id = builder.freshID()
                let stamp = builder.stamp()
                list.slots[id] = Slot(id: id, parent: anchor.parent, side: anchor.side, stamp: stamp)
                list.elements[id] = ListElement(
                    id: id, value: .scalar(.int(Int64(round * 10 + index))), valueStamp: stamp, position: id,
                    positionStamp: stamp)
                left = id
            }
        }
        #expect(list.slots.count == 2_000)
        #expect(list.orderedSlots() == Self.reference(list))
        #expect(list.orderedElements().map(\.value) == (1_990..<2_000).map { .scalar(.int(Int64($0))) })
    }
}

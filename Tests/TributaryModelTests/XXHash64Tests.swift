import Foundation
import Testing
import TributaryModel

/// The input of length `count` that the table below hashes: byte i is (i * 31 + 7) mod 256.
private func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

/// XXH64 with seed 0 of `pattern(0)` ... `pattern(100)`, computed with the reference implementation (python-xxhash
/// 4.1.0, libxxhash 0.8.4, `xxhash.xxh64(data, seed=0)`). Lengths 0-100 cover every path: the 32-byte stripes, the
/// 8-byte and 4-byte tails and the single bytes.
private let patternHashes: [UInt64] = [
    0xEF46_DB37_51D8_E999, 0xA96C_7F0C_E858_BBB7, 0xAC37_8C59_93CD_5F9A, 0x56E6_9576_32A4_87F9,
    0xC60D_15B1_E3FF_8F04, 0x8088_1585_8624_DD4E, 0xCF22_B4E8_7E9B_BD00, 0xAFBE_FC3D_6C6F_9A8E,
    0x3DA5_C7AA_2696_83E0, 0x4B17_A9BA_9E21_5C09, 0x6B88_9090_B8A9_22B8, 0x1FC0_70E4_4716_BD8E,
    0x8FE8_AB1C_1FD0_666E, 0x0382_284C_C19C_4ABB, 0x1523_F762_201B_A56E, 0xAE2A_37EB_9357_CAA7,
    0xA19A_D429_B02B_C413, 0xFE9F_0FEB_7EEE_DC09, 0xA44D_BC53_C815_D4FE, 0x3693_E04C_0DFC_7DD2,
    0x0BFB_ADB3_68E7_F37C, 0xFE78_6836_97D5_C575, 0xB071_4242_0C77_FE7F, 0xE77B_1FCE_A841_18C3,
    0x9294_38E5_C215_9EF9, 0x7E6C_9591_9380_459F, 0xAF2E_FE1A_A0CF_37DC, 0x8EDA_A24C_28D1_2EC6,
    0xA36B_5C40_9118_7D2A, 0xEB1F_EE1B_F095_4759, 0x6A54_EBE6_FE40_B928, 0x4A74_F3A1_A39A_D4A1,
    0x8D57_D6A4_671C_C43D, 0x62C9_FD21_ED85_7664, 0x42CC_E8A8_F5FC_5F1F, 0x85CB_CF9E_0D9C_BECA,
    0xA447_5C60_6B0A_BC3C, 0x5D71_D9FC_4B67_6D9F, 0x88A7_4AB8_EAEB_0218, 0x1789_5424_89E5_9CC4,
    0x49B4_5332_E280_F187, 0xB410_B484_64DC_1268, 0x9DAC_B790_A152_6540, 0x7C29_6A6B_49B1_88E7,
    0xA6B6_9C7C_EE5D_5B54, 0xAA6A_EB71_98C8_C81C, 0x7C4B_5A84_F7CD_59F3, 0x05E3_AB06_C6BB_0A6B,
    0x9F31_C521_803D_A811, 0x9F78_7017_DE72_7118, 0xCA2E_EE5C_B9FB_5469, 0x33A2_9BD1_6514_6948,
    0x76D9_CAAC_C61B_6870, 0xA7A6_E96A_5BE1_8EB9, 0x4A6D_8C8C_B7AB_9234, 0x2471_4409_0389_5716,
    0x69AE_A769_9ABF_3484, 0x49E8_D867_C0AC_8865, 0xD392_8F8D_2530_D5EE, 0x8A1F_4D8F_4C90_45FE,
    0xEAFE_FBF8_3AB6_2C32, 0x1BE3_BA2E_A412_89BE, 0x7ACA_EF6A_E2F7_A5B6, 0x5C32_0A0D_2707_057F,
    0x7BBA_BBC4_5729_D17E, 0xF398_0C34_BAE6_5DC1, 0x3708_2D58_BA42_15F9, 0x6ACE_F358_C3E5_21BD,
    0x2C0A_027B_BF50_EC18, 0x7D90_EA5F_45D7_05CB, 0x383A_51C4_8C4F_8F4C, 0x31BF_591B_7189_74D1,
    0x4063_B917_80EC_A3E6, 0xFE37_944E_E4DE_1188, 0x62C6_DCE1_03A4_F939, 0x6837_2688_B22C_91BD,
    0x43A0_F285_258B_FBD3, 0xDB97_AF1A_BC15_2D81, 0x1EF3_D958_69E0_0AE6, 0xF090_91AF_6C3D_95D5,
    0x7FB2_6396_EFCA_A30F, 0xF9BA_D421_7AA6_CFC7, 0xB6A5_A7DC_AAC8_D5D3, 0xEA36_B2CC_A41A_A5DB,
    0x9D02_3A66_80A6_9206, 0x6DA6_C43A_8402_B3D5, 0x21B6_7DFF_095C_57D5, 0x5138_9DFE_4EA3_3D31,
    0xF8C1_3E3A_C358_8869, 0x6244_08EA_804D_589C, 0xE02B_6957_7487_C15B, 0x4B92_A391_BC6C_B1F1,
    0x5A85_9824_9232_7A09, 0x6696_2B5F_6D39_B1CD, 0x7521_D2AC_0645_3B07, 0x90F6_CB6D_1DB4_1380,
    0x1A4B_2073_8505_1B55, 0xB801_6EEF_F392_BE5D, 0xE2F2_AEA4_F6C4_A4C1, 0xEDE5_C62D_F22A_B2D0,
    0xEFA0_AD2D_3E70_C151,
]

@Suite("XXH64") struct XXHash64Tests {
    @Test("Known answers from the xxHash reference")
    func knownAnswers() {
        #expect(XXHash64.hash([]) == 0xEF46_DB37_51D8_E999)
        #expect(XXHash64.hash(Array("a".utf8)) == 0xD24E_C4F1_A98C_6E5B)
        #expect(XXHash64.hash(Array("abc".utf8)) == 0x44BC_2CF5_AD77_0999)
        // 39 bytes: one 32-byte stripe, then an 8-byte tail (checked with python-xxhash).
        #expect(XXHash64.hash(Array("Nobody inspects the spammish repetition".utf8)) == 0xFBCE_A83C_8A37_8BF1)
        // 0, 1, ..., 255: eight stripes.
        #expect(XXHash64.hash((0...255).map { UInt8($0) }) == 0x1FAC_BE84_06CD_904B)
        // A million bytes.
        #expect(XXHash64.hash([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)) == 0xDC48_3AAA_9B4F_DC40)
    }

    @Test("Known answers with a seed")
    func seeded() {
        let golden: UInt64 = 0x9E37_79B9_7F4A_7C15
        #expect(XXHash64.hash([], seed: golden) == 0xC434_9FC9_3C01_0000)
        #expect(XXHash64.hash(Array("a".utf8), seed: golden) == 0x9A7C_6D2E_A455_68C9)
        #expect(XXHash64.hash(Array("abc".utf8), seed: golden) == 0x2ED0_F59D_6B43_AC8B)
        #expect(
            XXHash64.hash(Array("Nobody inspects the spammish repetition".utf8), seed: golden) == 0xEB8B_157C_A26C_BF34
        )
        #expect(XXHash64.hash((0...255).map { UInt8($0) }, seed: golden) == 0xCC29_7FEF_2BB4_8BBF)
        #expect(XXHash64.hash(pattern(100), seed: .max) == 0xBD4F_CAAB_F7CA_D1A6)
    }

    @Test("Every length from 0 to 100 matches the reference", arguments: 0...100)
    func everyLength(length: Int) {
        #expect(XXHash64.hash(pattern(length)) == patternHashes[length])
    }

    @Test("Unaligned buffers hash like arrays")
    func unaligned() {
        let bytes = pattern(100)
        for start in 0..<8 {
            for length in [0, 3, 4, 7, 8, 31, 32, 33, 40, 64, 90] where start + length <= bytes.count {
                let fromBuffer = bytes.withUnsafeBytes {
                    XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[start..<start + length]))
                }
                #expect(
                    fromBuffer == XXHash64.hash(Array(bytes[start..<start + length])),
                    "start \(start), length \(length)"
                )
            }
        }
        // Bytes 3..<43 of the pattern, checked with python-xxhash.
        #expect(XXHash64.hash(Array(bytes[3..<43])) == 0x1935_3840_D867_1BA4)
    }

    @Test("Pieces hash like their concatenation, split anywhere", arguments: [0, 1, 31, 32, 33, 58, 64, 100])
    func pieces(length: Int) {
        let bytes = pattern(length)
        bytes.withUnsafeBytes { all in
            for first in 0...length {
                for second in first...length {
                    var state = XXHash64.State()
                    state.update(UnsafeRawBufferPointer(rebasing: all[0..<first]))
                    state.update(UnsafeRawBufferPointer(rebasing: all[first..<second]))
                    state.update(UnsafeRawBufferPointer(rebasing: all[second..<length]))
                    #expect(
                        state.finalize() == patternHashes[length], "length \(length), split at \(first) and \(second)")
                }
            }
        }
    }
}

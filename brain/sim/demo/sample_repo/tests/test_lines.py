"""The report lines: layout, amounts and refused inputs (standard-library unittest)."""

import unittest

from billing.lines import credit_line, invoice_line, refund_line


class LinesTest(unittest.TestCase):
    def test_invoice_line_layout(self):
        self.assertEqual(
            invoice_line("  ada lovelace ", 1234.5),
            "INVOICE Ada Lovelace             1,234.50 EUR",
        )

    def test_refund_and_credit_share_the_layout(self):
        self.assertEqual(refund_line("bob", 3), "REFUND  Bob                          3.00 EUR")
        self.assertEqual(credit_line("eve", 0.1), "CREDIT  Eve                          0.10 EUR")

    def test_large_amounts_get_thousands_separators(self):
        self.assertIn("1,000,000.00", invoice_line("x", 1_000_000))

    def test_negative_amounts_are_refused(self):
        for line in (invoice_line, refund_line, credit_line):
            with self.assertRaises(ValueError):
                line("x", -1)

    def test_non_numbers_are_refused(self):
        for line in (invoice_line, refund_line, credit_line):
            for bad in ("12", None, True):
                with self.assertRaises(TypeError):
                    line("x", bad)


if __name__ == "__main__":
    unittest.main()

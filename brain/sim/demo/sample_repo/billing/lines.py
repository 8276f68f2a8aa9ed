"""Plain-text lines for the billing report."""


def invoice_line(customer, amount):
    """One invoice line: the customer and the amount due."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise TypeError(f"amount must be a number, got {amount!r}")
    if amount < 0:
        raise ValueError(f"amount must not be negative, got {amount!r}")
    cents = round(amount * 100)
    text = f"{cents // 100:,}.{cents % 100:02d}"
    return f"INVOICE {customer.strip().title():<20} {text:>12} EUR"


def refund_line(customer, amount):
    """One refund line: the customer and the amount paid back."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise TypeError(f"amount must be a number, got {amount!r}")
    if amount < 0:
        raise ValueError(f"amount must not be negative, got {amount!r}")
    cents = round(amount * 100)
    text = f"{cents // 100:,}.{cents % 100:02d}"
    return f"REFUND  {customer.strip().title():<20} {text:>12} EUR"


def credit_line(customer, amount):
    """One credit line: the customer and the amount credited to their account."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise TypeError(f"amount must be a number, got {amount!r}")
    if amount < 0:
        raise ValueError(f"amount must not be negative, got {amount!r}")
    cents = round(amount * 100)
    text = f"{cents // 100:,}.{cents % 100:02d}"
    return f"CREDIT  {customer.strip().title():<20} {text:>12} EUR"

"""Arrow schemas, primary keys and declared value domains of the 24 TPC-DS tables.

A namespace of its own (``TPCDS``), apart from ``schemas.TABLES``: TPC-DS has a
``customer`` table that is not TPC-H's, so the two benchmarks live in different table
stores (``imp data tpcds --root ...``).

Invariants:
- Each schema lists exactly the columns, order and types ``tpcgen-cli tpcds parquet``
  (4.0.0) writes, with its nullability: the primary key columns and the business ids
  (``*_id``) are NOT NULL, every other column may be NULL (the generator leaves some NULL
  on purpose). Strings are ``string`` (the files say ``string_view``;
  ``imp_core.workloads.tpcds.load_tpcds_tables`` casts). Surrogate keys are ``int32``,
  order and ticket numbers ``int64``, money ``decimal128(7, 2)`` (``p_cost``
  ``decimal128(15, 2)``), offsets and tax rates ``decimal128(5, 2)``, dates ``date32``.
  ``dbgen_version``, the generator's metadata, is not one of the 24.
- ``key`` is the specification's primary key (TPC-DS 2.3-2.4): the surrogate key of a
  dimension; (item, ticket or order number) of a sales or returns table; (date, item,
  warehouse) of ``inventory``.
- ``domains`` (inclusive ``(low, high)``, ``None`` for an open side; NULLs are outside
  any domain's concern) hold for every scale factor, by the specification or by the
  generator (checked on SF 0.01, 0.1 and 1):
  - every surrogate key ``*_sk`` is >= 1, a ``*date_sk`` lies in ``d_date_sk``'s range
    (the Julian days of 1900-01-02 .. 2100-01-01) and a ``*time_sk`` in [0, 86399];
  - quantities sold or returned are 1 .. 100, a wholesale cost 1.00 .. 100.00, and every
    price, amount, cost, tax, fee, coupon, payment, refund, credit and loss of the sales
    and returns tables is >= 0 (net profit alone may be negative);
  - calendar and clock fields (``d_moy`` 1 .. 12, ``t_hour`` 0 .. 23, ...), counts and
    the small code ranges of the dimensions (``i_category_id`` 1 .. 10, ...).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from imp_core.workloads.schemas import Bound, TableInfo

I32 = pa.int32()
I64 = pa.int64()
STR = pa.string()
DATE = pa.date32()
D5 = pa.decimal128(5, 2)
D7 = pa.decimal128(7, 2)
DEC = pa.decimal128(15, 2)

# d_date_sk is the Julian day number of d_date (1900-01-02 .. 2100-01-01)
DATE_SK: tuple[Bound, Bound] = (2_415_022, 2_488_070)
TIME_SK: tuple[Bound, Bound] = (0, 86_399)
_POSITIVE: tuple[Bound, Bound] = (1, None)
_COUNT: tuple[Bound, Bound] = (0, None)
_MONEY_UP: tuple[Bound, Bound] = (Decimal("0.00"), None)
_QUANTITY: tuple[Bound, Bound] = (1, 100)


def _key_domain(column: str) -> tuple[Bound, Bound]:
    """The domain of a surrogate key column (``*_sk``) by what it refers to."""
    if column.endswith("date_sk"):
        return DATE_SK
    if column.endswith("time_sk"):
        return TIME_SK
    return _POSITIVE


def _ds(name: str, key: tuple[str, ...], columns: list[tuple[str, pa.DataType]],
        not_null: tuple[str, ...] = (), domains: dict[str, tuple[Bound, Bound]] | None = None,
        money: tuple[str, ...] = ()) -> TableInfo:
    """One table: NOT NULL for ``key`` and ``not_null``, the surrogate keys' domains, every
    column of ``money`` >= 0, then ``domains`` (which win)."""
    required = set(key) | set(not_null)
    schema = pa.schema([pa.field(c, t, nullable=c not in required) for c, t in columns])
    declared = {c: _key_domain(c) for c, _ in columns if c.endswith("_sk")}
    declared.update({c: _POSITIVE for c in key if c.endswith("_number")})  # order, ticket
    declared.update({c: _MONEY_UP for c in money})
    declared.update(domains or {})
    return TableInfo(name, schema, key=key, domains=declared)


def _sales(prefix: str, shipped: bool) -> dict[str, object]:
    """Quantity, wholesale cost and the amounts >= 0 of a sales table (``ss``, ``cs``,
    ``ws``; ``shipped``: the catalog and web channels' shipping columns)."""
    amounts = ["list_price", "sales_price", "ext_discount_amt", "ext_sales_price",
               "ext_wholesale_cost", "ext_list_price", "ext_tax", "coupon_amt", "net_paid",
               "net_paid_inc_tax"]
    if shipped:
        amounts += ["ext_ship_cost", "net_paid_inc_ship", "net_paid_inc_ship_tax"]
    return {"money": tuple(f"{prefix}_{a}" for a in amounts),
            "domains": {f"{prefix}_quantity": _QUANTITY,
                        f"{prefix}_wholesale_cost": (Decimal("1.00"), Decimal("100.00"))}}


def _returns(prefix: str, amount: str, credit: str) -> dict[str, object]:
    """Quantity and the amounts >= 0 of a returns table (``sr``, ``cr``, ``wr``)."""
    amounts = [amount, "return_tax", "return_amt_inc_tax", "fee", "return_ship_cost",
               "refunded_cash", "reversed_charge", credit, "net_loss"]
    return {"money": tuple(f"{prefix}_{a}" for a in amounts),
            "domains": {f"{prefix}_return_quantity": _QUANTITY,
                        f"{prefix}_fee": (Decimal("0.50"), Decimal("100.00"))}}


_TPCDS = [
    _ds(
        "call_center",
        key=("cc_call_center_sk",),
        not_null=("cc_call_center_id",),
        columns=[
            ("cc_call_center_sk", I32), ("cc_call_center_id", STR), ("cc_rec_start_date", DATE),
            ("cc_rec_end_date", DATE), ("cc_closed_date_sk", I32), ("cc_open_date_sk", I32),
            ("cc_name", STR), ("cc_class", STR), ("cc_employees", I32), ("cc_sq_ft", I32),
            ("cc_hours", STR), ("cc_manager", STR), ("cc_mkt_id", I32), ("cc_mkt_class", STR),
            ("cc_mkt_desc", STR), ("cc_market_manager", STR), ("cc_division", I32),
            ("cc_division_name", STR), ("cc_company", I32), ("cc_company_name", STR),
            ("cc_street_number", STR), ("cc_street_name", STR), ("cc_street_type", STR),
            ("cc_suite_number", STR), ("cc_city", STR), ("cc_county", STR), ("cc_state", STR),
            ("cc_zip", STR), ("cc_country", STR), ("cc_gmt_offset", D5),
            ("cc_tax_percentage", D5),
        ],
        domains={"cc_employees": _COUNT, "cc_sq_ft": _COUNT},
        money=("cc_tax_percentage",),
    ),
    _ds(
        "catalog_page",
        key=("cp_catalog_page_sk",),
        not_null=("cp_catalog_page_id",),
        columns=[
            ("cp_catalog_page_sk", I32), ("cp_catalog_page_id", STR), ("cp_start_date_sk", I32),
            ("cp_end_date_sk", I32), ("cp_department", STR), ("cp_catalog_number", I32),
            ("cp_catalog_page_number", I32), ("cp_description", STR), ("cp_type", STR),
        ],
        domains={"cp_catalog_number": _POSITIVE, "cp_catalog_page_number": _POSITIVE},
    ),
    _ds(
        "catalog_returns",
        key=("cr_item_sk", "cr_order_number"),
        columns=[
            ("cr_returned_date_sk", I32), ("cr_returned_time_sk", I32), ("cr_item_sk", I32),
            ("cr_refunded_customer_sk", I32), ("cr_refunded_cdemo_sk", I32),
            ("cr_refunded_hdemo_sk", I32), ("cr_refunded_addr_sk", I32),
            ("cr_returning_customer_sk", I32), ("cr_returning_cdemo_sk", I32),
            ("cr_returning_hdemo_sk", I32), ("cr_returning_addr_sk", I32),
            ("cr_call_center_sk", I32), ("cr_catalog_page_sk", I32), ("cr_ship_mode_sk", I32),
            ("cr_warehouse_sk", I32), ("cr_reason_sk", I32), ("cr_order_number", I64),
            ("cr_return_quantity", I32), ("cr_return_amount", D7), ("cr_return_tax", D7),
            ("cr_return_amt_inc_tax", D7), ("cr_fee", D7), ("cr_return_ship_cost", D7),
            ("cr_refunded_cash", D7), ("cr_reversed_charge", D7), ("cr_store_credit", D7),
            ("cr_net_loss", D7),
        ],
        **_returns("cr", "return_amount", "store_credit"),
    ),
    _ds(
        "catalog_sales",
        key=("cs_item_sk", "cs_order_number"),
        columns=[
            ("cs_sold_date_sk", I32), ("cs_sold_time_sk", I32), ("cs_ship_date_sk", I32),
            ("cs_bill_customer_sk", I32), ("cs_bill_cdemo_sk", I32), ("cs_bill_hdemo_sk", I32),
            ("cs_bill_addr_sk", I32), ("cs_ship_customer_sk", I32), ("cs_ship_cdemo_sk", I32),
            ("cs_ship_hdemo_sk", I32), ("cs_ship_addr_sk", I32), ("cs_call_center_sk", I32),
            ("cs_catalog_page_sk", I32), ("cs_ship_mode_sk", I32), ("cs_warehouse_sk", I32),
            ("cs_item_sk", I32), ("cs_promo_sk", I32), ("cs_order_number", I64),
            ("cs_quantity", I32), ("cs_wholesale_cost", D7), ("cs_list_price", D7),
            ("cs_sales_price", D7), ("cs_ext_discount_amt", D7), ("cs_ext_sales_price", D7),
            ("cs_ext_wholesale_cost", D7), ("cs_ext_list_price", D7), ("cs_ext_tax", D7),
            ("cs_coupon_amt", D7), ("cs_ext_ship_cost", D7), ("cs_net_paid", D7),
            ("cs_net_paid_inc_tax", D7), ("cs_net_paid_inc_ship", D7),
            ("cs_net_paid_inc_ship_tax", D7), ("cs_net_profit", D7),
        ],
        **_sales("cs", shipped=True),
    ),
    _ds(
        "customer",
        key=("c_customer_sk",),
        not_null=("c_customer_id",),
        columns=[
            ("c_customer_sk", I32), ("c_customer_id", STR), ("c_current_cdemo_sk", I32),
            ("c_current_hdemo_sk", I32), ("c_current_addr_sk", I32),
            ("c_first_shipto_date_sk", I32), ("c_first_sales_date_sk", I32),
            ("c_salutation", STR), ("c_first_name", STR), ("c_last_name", STR),
            ("c_preferred_cust_flag", STR), ("c_birth_day", I32), ("c_birth_month", I32),
            ("c_birth_year", I32), ("c_birth_country", STR), ("c_login", STR),
            ("c_email_address", STR), ("c_last_review_date_sk", I32),
        ],
        domains={"c_birth_day": (1, 31), "c_birth_month": (1, 12)},
    ),
    _ds(
        "customer_address",
        key=("ca_address_sk",),
        not_null=("ca_address_id",),
        columns=[
            ("ca_address_sk", I32), ("ca_address_id", STR), ("ca_street_number", STR),
            ("ca_street_name", STR), ("ca_street_type", STR), ("ca_suite_number", STR),
            ("ca_city", STR), ("ca_county", STR), ("ca_state", STR), ("ca_zip", STR),
            ("ca_country", STR), ("ca_gmt_offset", D5), ("ca_location_type", STR),
        ],
    ),
    _ds(
        "customer_demographics",
        key=("cd_demo_sk",),
        columns=[
            ("cd_demo_sk", I32), ("cd_gender", STR), ("cd_marital_status", STR),
            ("cd_education_status", STR), ("cd_purchase_estimate", I32),
            ("cd_credit_rating", STR), ("cd_dep_count", I32), ("cd_dep_employed_count", I32),
            ("cd_dep_college_count", I32),
        ],
        domains={"cd_purchase_estimate": (500, 10_000), "cd_dep_count": (0, 6),
                 "cd_dep_employed_count": (0, 6), "cd_dep_college_count": (0, 6)},
    ),
    _ds(
        "date_dim",
        key=("d_date_sk",),
        not_null=("d_date_id",),
        columns=[
            ("d_date_sk", I32), ("d_date_id", STR), ("d_date", DATE), ("d_month_seq", I32),
            ("d_week_seq", I32), ("d_quarter_seq", I32), ("d_year", I32), ("d_dow", I32),
            ("d_moy", I32), ("d_dom", I32), ("d_qoy", I32), ("d_fy_year", I32),
            ("d_fy_quarter_seq", I32), ("d_fy_week_seq", I32), ("d_day_name", STR),
            ("d_quarter_name", STR), ("d_holiday", STR), ("d_weekend", STR),
            ("d_following_holiday", STR), ("d_first_dom", I32), ("d_last_dom", I32),
            ("d_same_day_ly", I32), ("d_same_day_lq", I32), ("d_current_day", STR),
            ("d_current_week", STR), ("d_current_month", STR), ("d_current_quarter", STR),
            ("d_current_year", STR),
        ],
        domains={
            "d_date": (dt.date(1900, 1, 2), dt.date(2100, 1, 1)),
            "d_month_seq": (0, 2400), "d_week_seq": (1, 10_436), "d_quarter_seq": (1, 801),
            "d_year": (1900, 2100), "d_dow": (0, 6), "d_moy": (1, 12), "d_dom": (1, 31),
            "d_qoy": (1, 4), "d_fy_year": (1900, 2100), "d_fy_quarter_seq": (1, 801),
            "d_fy_week_seq": (1, 10_436),
        },
    ),
    _ds(
        "household_demographics",
        key=("hd_demo_sk",),
        columns=[
            ("hd_demo_sk", I32), ("hd_income_band_sk", I32), ("hd_buy_potential", STR),
            ("hd_dep_count", I32), ("hd_vehicle_count", I32),
        ],
        domains={"hd_income_band_sk": (1, 20), "hd_dep_count": (0, 9),
                 "hd_vehicle_count": (-1, 4)},
    ),
    _ds(
        "income_band",
        key=("ib_income_band_sk",),
        columns=[
            ("ib_income_band_sk", I32), ("ib_lower_bound", I32), ("ib_upper_bound", I32),
        ],
        domains={"ib_income_band_sk": (1, 20), "ib_lower_bound": _COUNT,
                 "ib_upper_bound": _COUNT},
    ),
    _ds(
        "inventory",
        key=("inv_date_sk", "inv_item_sk", "inv_warehouse_sk"),
        columns=[
            ("inv_date_sk", I32), ("inv_item_sk", I32), ("inv_warehouse_sk", I32),
            ("inv_quantity_on_hand", I32),
        ],
        domains={"inv_quantity_on_hand": (0, 1000)},
    ),
    _ds(
        "item",
        key=("i_item_sk",),
        not_null=("i_item_id",),
        columns=[
            ("i_item_sk", I32), ("i_item_id", STR), ("i_rec_start_date", DATE),
            ("i_rec_end_date", DATE), ("i_item_desc", STR), ("i_current_price", D7),
            ("i_wholesale_cost", D7), ("i_brand_id", I32), ("i_brand", STR), ("i_class_id", I32),
            ("i_class", STR), ("i_category_id", I32), ("i_category", STR), ("i_manufact_id", I32),
            ("i_manufact", STR), ("i_size", STR), ("i_formulation", STR), ("i_color", STR),
            ("i_units", STR), ("i_container", STR), ("i_manager_id", I32),
            ("i_product_name", STR),
        ],
        domains={"i_brand_id": _POSITIVE, "i_class_id": (1, 16), "i_category_id": (1, 10),
                 "i_manufact_id": (1, 1000), "i_manager_id": (1, 100)},
        money=("i_current_price", "i_wholesale_cost"),
    ),
    _ds(
        "promotion",
        key=("p_promo_sk",),
        not_null=("p_promo_id",),
        columns=[
            ("p_promo_sk", I32), ("p_promo_id", STR), ("p_start_date_sk", I32),
            ("p_end_date_sk", I32), ("p_item_sk", I32), ("p_cost", DEC),
            ("p_response_target", I32), ("p_promo_name", STR), ("p_channel_dmail", STR),
            ("p_channel_email", STR), ("p_channel_catalog", STR), ("p_channel_tv", STR),
            ("p_channel_radio", STR), ("p_channel_press", STR), ("p_channel_event", STR),
            ("p_channel_demo", STR), ("p_channel_details", STR), ("p_purpose", STR),
            ("p_discount_active", STR),
        ],
        money=("p_cost",),
    ),
    _ds(
        "reason",
        key=("r_reason_sk",),
        not_null=("r_reason_id",),
        columns=[
            ("r_reason_sk", I32), ("r_reason_id", STR), ("r_reason_desc", STR),
        ],
    ),
    _ds(
        "ship_mode",
        key=("sm_ship_mode_sk",),
        not_null=("sm_ship_mode_id",),
        columns=[
            ("sm_ship_mode_sk", I32), ("sm_ship_mode_id", STR), ("sm_type", STR),
            ("sm_code", STR), ("sm_carrier", STR), ("sm_contract", STR),
        ],
    ),
    _ds(
        "store",
        key=("s_store_sk",),
        not_null=("s_store_id",),
        columns=[
            ("s_store_sk", I32), ("s_store_id", STR), ("s_rec_start_date", DATE),
            ("s_rec_end_date", DATE), ("s_closed_date_sk", I32), ("s_store_name", STR),
            ("s_number_employees", I32), ("s_floor_space", I32), ("s_hours", STR),
            ("s_manager", STR), ("s_market_id", I32), ("s_geography_class", STR),
            ("s_market_desc", STR), ("s_market_manager", STR), ("s_division_id", I32),
            ("s_division_name", STR), ("s_company_id", I32), ("s_company_name", STR),
            ("s_street_number", STR), ("s_street_name", STR), ("s_street_type", STR),
            ("s_suite_number", STR), ("s_city", STR), ("s_county", STR), ("s_state", STR),
            ("s_zip", STR), ("s_country", STR), ("s_gmt_offset", D5), ("s_tax_precentage", D5),
        ],
        domains={"s_number_employees": _COUNT, "s_floor_space": _COUNT},
        money=("s_tax_precentage",),
    ),
    _ds(
        "store_returns",
        key=("sr_item_sk", "sr_ticket_number"),
        columns=[
            ("sr_returned_date_sk", I32), ("sr_return_time_sk", I32), ("sr_item_sk", I32),
            ("sr_customer_sk", I32), ("sr_cdemo_sk", I32), ("sr_hdemo_sk", I32),
            ("sr_addr_sk", I32), ("sr_store_sk", I32), ("sr_reason_sk", I32),
            ("sr_ticket_number", I64), ("sr_return_quantity", I32), ("sr_return_amt", D7),
            ("sr_return_tax", D7), ("sr_return_amt_inc_tax", D7), ("sr_fee", D7),
            ("sr_return_ship_cost", D7), ("sr_refunded_cash", D7), ("sr_reversed_charge", D7),
            ("sr_store_credit", D7), ("sr_net_loss", D7),
        ],
        **_returns("sr", "return_amt", "store_credit"),
    ),
    _ds(
        "store_sales",
        key=("ss_item_sk", "ss_ticket_number"),
        columns=[
            ("ss_sold_date_sk", I32), ("ss_sold_time_sk", I32), ("ss_item_sk", I32),
            ("ss_customer_sk", I32), ("ss_cdemo_sk", I32), ("ss_hdemo_sk", I32),
            ("ss_addr_sk", I32), ("ss_store_sk", I32), ("ss_promo_sk", I32),
            ("ss_ticket_number", I64), ("ss_quantity", I32), ("ss_wholesale_cost", D7),
            ("ss_list_price", D7), ("ss_sales_price", D7), ("ss_ext_discount_amt", D7),
            ("ss_ext_sales_price", D7), ("ss_ext_wholesale_cost", D7), ("ss_ext_list_price", D7),
            ("ss_ext_tax", D7), ("ss_coupon_amt", D7), ("ss_net_paid", D7),
            ("ss_net_paid_inc_tax", D7), ("ss_net_profit", D7),
        ],
        **_sales("ss", shipped=False),
    ),
    _ds(
        "time_dim",
        key=("t_time_sk",),
        not_null=("t_time_id",),
        columns=[
            ("t_time_sk", I32), ("t_time_id", STR), ("t_time", I32), ("t_hour", I32),
            ("t_minute", I32), ("t_second", I32), ("t_am_pm", STR), ("t_shift", STR),
            ("t_sub_shift", STR), ("t_meal_time", STR),
        ],
        domains={"t_time": TIME_SK, "t_hour": (0, 23), "t_minute": (0, 59),
                 "t_second": (0, 59)},
    ),
    _ds(
        "warehouse",
        key=("w_warehouse_sk",),
        not_null=("w_warehouse_id",),
        columns=[
            ("w_warehouse_sk", I32), ("w_warehouse_id", STR), ("w_warehouse_name", STR),
            ("w_warehouse_sq_ft", I32), ("w_street_number", STR), ("w_street_name", STR),
            ("w_street_type", STR), ("w_suite_number", STR), ("w_city", STR), ("w_county", STR),
            ("w_state", STR), ("w_zip", STR), ("w_country", STR), ("w_gmt_offset", D5),
        ],
        domains={"w_warehouse_sq_ft": _COUNT},
    ),
    _ds(
        "web_page",
        key=("wp_web_page_sk",),
        not_null=("wp_web_page_id",),
        columns=[
            ("wp_web_page_sk", I32), ("wp_web_page_id", STR), ("wp_rec_start_date", DATE),
            ("wp_rec_end_date", DATE), ("wp_creation_date_sk", I32), ("wp_access_date_sk", I32),
            ("wp_autogen_flag", STR), ("wp_customer_sk", I32), ("wp_url", STR), ("wp_type", STR),
            ("wp_char_count", I32), ("wp_link_count", I32), ("wp_image_count", I32),
            ("wp_max_ad_count", I32),
        ],
        domains={"wp_char_count": _COUNT, "wp_link_count": _COUNT, "wp_image_count": _COUNT,
                 "wp_max_ad_count": _COUNT},
    ),
    _ds(
        "web_returns",
        key=("wr_item_sk", "wr_order_number"),
        columns=[
            ("wr_returned_date_sk", I32), ("wr_returned_time_sk", I32), ("wr_item_sk", I32),
            ("wr_refunded_customer_sk", I32), ("wr_refunded_cdemo_sk", I32),
            ("wr_refunded_hdemo_sk", I32), ("wr_refunded_addr_sk", I32),
            ("wr_returning_customer_sk", I32), ("wr_returning_cdemo_sk", I32),
            ("wr_returning_hdemo_sk", I32), ("wr_returning_addr_sk", I32),
            ("wr_web_page_sk", I32), ("wr_reason_sk", I32), ("wr_order_number", I64),
            ("wr_return_quantity", I32), ("wr_return_amt", D7), ("wr_return_tax", D7),
            ("wr_return_amt_inc_tax", D7), ("wr_fee", D7), ("wr_return_ship_cost", D7),
            ("wr_refunded_cash", D7), ("wr_reversed_charge", D7), ("wr_account_credit", D7),
            ("wr_net_loss", D7),
        ],
        **_returns("wr", "return_amt", "account_credit"),
    ),
    _ds(
        "web_sales",
        key=("ws_item_sk", "ws_order_number"),
        columns=[
            ("ws_sold_date_sk", I32), ("ws_sold_time_sk", I32), ("ws_ship_date_sk", I32),
            ("ws_item_sk", I32), ("ws_bill_customer_sk", I32), ("ws_bill_cdemo_sk", I32),
            ("ws_bill_hdemo_sk", I32), ("ws_bill_addr_sk", I32), ("ws_ship_customer_sk", I32),
            ("ws_ship_cdemo_sk", I32), ("ws_ship_hdemo_sk", I32), ("ws_ship_addr_sk", I32),
            ("ws_web_page_sk", I32), ("ws_web_site_sk", I32), ("ws_ship_mode_sk", I32),
            ("ws_warehouse_sk", I32), ("ws_promo_sk", I32), ("ws_order_number", I64),
            ("ws_quantity", I32), ("ws_wholesale_cost", D7), ("ws_list_price", D7),
            ("ws_sales_price", D7), ("ws_ext_discount_amt", D7), ("ws_ext_sales_price", D7),
            ("ws_ext_wholesale_cost", D7), ("ws_ext_list_price", D7), ("ws_ext_tax", D7),
            ("ws_coupon_amt", D7), ("ws_ext_ship_cost", D7), ("ws_net_paid", D7),
            ("ws_net_paid_inc_tax", D7), ("ws_net_paid_inc_ship", D7),
            ("ws_net_paid_inc_ship_tax", D7), ("ws_net_profit", D7),
        ],
        **_sales("ws", shipped=True),
    ),
    _ds(
        "web_site",
        key=("web_site_sk",),
        not_null=("web_site_id",),
        columns=[
            ("web_site_sk", I32), ("web_site_id", STR), ("web_rec_start_date", DATE),
            ("web_rec_end_date", DATE), ("web_name", STR), ("web_open_date_sk", I32),
            ("web_close_date_sk", I32), ("web_class", STR), ("web_manager", STR),
            ("web_mkt_id", I32), ("web_mkt_class", STR), ("web_mkt_desc", STR),
            ("web_market_manager", STR), ("web_company_id", I32), ("web_company_name", STR),
            ("web_street_number", STR), ("web_street_name", STR), ("web_street_type", STR),
            ("web_suite_number", STR), ("web_city", STR), ("web_county", STR), ("web_state", STR),
            ("web_zip", STR), ("web_country", STR), ("web_gmt_offset", D5),
            ("web_tax_percentage", D5),
        ],
        money=("web_tax_percentage",),
    ),
]

TPCDS_TABLES: tuple[str, ...] = tuple(info.name for info in _TPCDS)
TPCDS: dict[str, TableInfo] = {info.name: info for info in _TPCDS}
# the fact tables, largest first at every scale (the sketch attribute of a query is the
# first key column of the largest table it reads, unless its header says otherwise)
FACT_TABLES: tuple[str, ...] = ("store_sales", "catalog_sales", "inventory", "web_sales",
                                "store_returns", "catalog_returns", "web_returns")


def tpcds_catalog() -> dict[str, pa.Schema]:
    """Table name -> Arrow schema of the 24 TPC-DS tables."""
    return {name: info.schema for name, info in TPCDS.items()}

using System.Collections.Immutable;
using Microsoft.AspNetCore.Mvc;

namespace PersistentServices.Sample.Controllers;

/// <summary>A shopping cart per client session: an MVC controller whose actions run exactly once.</summary>
[ApiController]
[Route("cart")]
[Persistent]
public sealed partial class CartController : ControllerBase
{
    /// <summary>The session's cart lines. Not logged: rebuilt after a crash by replaying the session's requests.</summary>
    [SessionState]
    public partial ImmutableDictionary<string, int>? Lines { get; set; }

    /// <summary>Adds <c>quantity</c> of <c>sku</c>.</summary>
    [HttpPost("items")]
    public ActionResult<CartView> Add(AddToCart body)
    {
        if (body.Quantity <= 0)
        {
            return ValidationProblem(detail: "quantity must be positive");
        }

        var lines = Lines ?? ImmutableDictionary<string, int>.Empty;
        Lines = lines.SetItem(body.Sku, lines.GetValueOrDefault(body.Sku) + body.Quantity);
        return View();
    }

    /// <summary>Removes a SKU from the cart.</summary>
    [HttpDelete("items/{sku}")]
    public ActionResult<CartView> Remove(string sku)
    {
        Lines = (Lines ?? ImmutableDictionary<string, int>.Empty).Remove(sku);
        return View();
    }

    /// <summary>Shows the cart: a read-only method, not logged, forcing nothing.</summary>
    [HttpGet]
    [PersistentReadOnly]
    public ActionResult<CartView> Get() => View();

    private CartView View()
    {
        var lines = (Lines ?? ImmutableDictionary<string, int>.Empty).OrderBy(l => l.Key, StringComparer.Ordinal).Select(l => new CartLine(l.Key, l.Value)).ToList();
        return new CartView(lines, lines.Sum(l => l.Quantity));
    }
}

public sealed record AddToCart(string Sku, int Quantity);

public sealed record CartLine(string Sku, int Quantity);

public sealed record CartView(IReadOnlyList<CartLine> Lines, int Items);

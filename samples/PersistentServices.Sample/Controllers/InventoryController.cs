using Microsoft.AspNetCore.Mvc;
using PersistentServices;

namespace PersistentServices.Sample.Controllers;

/// <summary>
/// Shared, in-memory inventory: the stock of each SKU is an independent shared variable (keyed shared state, value
/// logged on every read and write), recovered after a crash from the log without a database. Every adjustment also takes
/// a ticket from a shared counter while it holds the SKU's lock, so ticket order is one serial order of all adjustments
/// (the crash harness checks the acknowledged replies against it).
/// </summary>
[ApiController]
[Route("inventory")]
[Persistent]
public sealed partial class InventoryController : ControllerBase
{
    /// <summary>Stock per SKU.</summary>
    public static readonly SharedMap<string, StockLevel?> Stock = new("PersistentServices.Sample.Inventory.Stock");

    /// <summary>The last ticket handed out.</summary>
    public static readonly SharedVariable<long> Tickets = new("PersistentServices.Sample.Inventory.Tickets");

    /// <summary>The number of orders placed (a [Shared] property: read and written, value-logged).</summary>
    [Shared]
    public static partial long OrdersPlaced { get; set; }

    /// <summary>Adds <c>delta</c> (may be negative; stock never goes below zero) to a SKU's stock.</summary>
    [HttpPost("adjust")]
    public ActionResult<AdjustReply> Adjust(AdjustStock body)
    {
        long ticket = 0;
        var level = Stock.Update(body.Sku, current =>
        {
            ticket = Tickets.Update(t => t + 1);
            var stock = current ?? new StockLevel(0, 0);
            return new StockLevel(stock.Version + 1, Math.Max(0, stock.Quantity + body.Delta));
        })!;
        return new AdjustReply(body.OpId, ticket, body.Sku, level.Version, level.Quantity);
    }

    /// <summary>Places an order: an id and a time from the logged sources, so a replay produces the same reply.</summary>
    [HttpPost("orders")]
    public ActionResult<OrderReply> Order(PlaceOrder body, [FromServices] PersistentTimeProvider time, [FromServices] IPersistentIdGenerator ids)
    {
        OrdersPlaced += 1;
        return new OrderReply(ids.NewGuid(), time.GetUtcNow(), body.Sku, OrdersPlaced);
    }

    /// <summary>Shows the stock of the given SKUs and the ticket counter (read-only).</summary>
    [HttpGet]
    [PersistentReadOnly]
    public ActionResult<InventoryView> Get([FromQuery] string[] sku)
        => new InventoryView(Tickets.Read(), OrdersPlaced, sku.ToDictionary(s => s, s => Stock.Get(s) ?? new StockLevel(0, 0)));
}

public sealed record StockLevel(long Version, int Quantity);

public sealed record AdjustStock(string OpId, string Sku, int Delta);

public sealed record AdjustReply(string OpId, long Ticket, string Sku, long Version, int Quantity);

public sealed record PlaceOrder(string Sku);

public sealed record OrderReply(Guid OrderId, DateTimeOffset PlacedAt, string Sku, long OrdersPlaced);

public sealed record InventoryView(long Tickets, long OrdersPlaced, IReadOnlyDictionary<string, StockLevel> Stock);

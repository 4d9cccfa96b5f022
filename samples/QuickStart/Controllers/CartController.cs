using System.Collections.Immutable;
using Microsoft.AspNetCore.Mvc;
using PersistentServices;               // [Persistent], [SessionState], [PersistentReadOnly], SharedVariable<T>

namespace QuickStart.Controllers;

[ApiController, Route("cart"), Persistent]   // every action runs exactly once per client request
public sealed partial class CartController : ControllerBase
{
    // Per session, in memory; after a crash rebuilt by replaying the session's logged requests.
    [SessionState] public partial ImmutableList<string>? Items { get; set; }

    // One value for all sessions; every read and write is logged with its value.
    public static readonly SharedVariable<long> ItemsAdded = new("QuickStart.ItemsAdded");

    [HttpPost("items")]
    public IActionResult Add(string sku)
    {
        Items = (Items ?? []).Add(sku);
        var added = ItemsAdded.Update(n => n + 1);
        return Ok(new { items = Items, itemsAdded = added });
    }

    [HttpGet, PersistentReadOnly]   // not logged, forces nothing; needs PS-Session
    public IActionResult Get() => Ok(new { items = Items ?? [] });

    [HttpGet("stats"), PersistentReadOnly]   // reads only shared state: no session needed
    public IActionResult Stats() => Ok(new { itemsAdded = ItemsAdded.Read() });
}

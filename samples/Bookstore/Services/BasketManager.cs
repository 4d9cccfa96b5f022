using System.Collections.Immutable;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// A buyer's basket ([Phoenix/App §3.2.1]: a subordinate component). It lives in BookSeller's process and only
/// BookSeller's requests call it: ordinary method calls, neither intercepted nor logged, repeated by replay. Its state
/// is per buyer: a <c>[SessionState]</c> property of the buyer's session at BookSeller, rebuilt by replay after a
/// crash. The stores it calls are persistent calls of BookSeller's request.
/// </summary>
[Subordinate]
internal sealed partial class BasketManager(StoreDirectory stores, ComponentSettings settings)
{
    /// <summary>The buyer's basket, in the order the books were added.</summary>
    [SessionState]
    public partial ImmutableList<BasketItem>? Items { get; set; }

    /// <summary>Reserves the book at its store and puts it in the basket; nothing changes when the store has none left.</summary>
    public async Task<AddResult> AddAsync(string store, string bookId)
    {
        var reserved = await stores.Get(store).ReserveAsync(bookId);
        var items = Items ?? [];
        if (!reserved.Reserved)
        {
            return new AddResult(false, null, items.Count, Build());
        }

        var item = new BasketItem(store, bookId, reserved.Title, reserved.Price);
        Items = items.Add(item);
        return new AddResult(true, item, items.Count + 1, Build());
    }

    /// <summary>The upgraded build's added reply field; none in the first build.</summary>
    private int? Build() => settings.Build > 1 ? settings.Build : null;

    /// <summary>Returns every book to its store (one call per book, in basket order) and empties the basket.</summary>
    public async Task<EmptyResult> EmptyAsync()
    {
        var items = Items ?? [];
        foreach (var item in items)
        {
            await stores.Get(item.Store).ReleaseAsync(item.BookId);
        }

        Items = [];
        return new EmptyResult(items);
    }

    /// <summary>The basket's lines and subtotal.</summary>
    public (ImmutableList<BasketItem> Items, decimal Subtotal) Contents()
    {
        var items = Items ?? [];
        return (items, items.Sum(i => i.Price));
    }
}

namespace PersistentServices.Bookstore.Tests;

/// <summary>
/// <c>Bookstore buyer --base-url …</c>, BookBuyer alone against services that run elsewhere (as in a cluster, behind
/// <c>kubectl port-forward</c>): here the six services started with <c>serve</c> on loopback ports, killed and restarted
/// by the test as a kubelet would, and the buyer's reconciliation from the client side.
/// </summary>
public sealed class BuyerCommandTests
{
    [Fact]
    [Trait("Category", "Crash")]
    public async Task Buyer_ServicesKilledAndRestartedUnderItsLoops_Reconciles()
    {
        await using var bookstore = await ServedBookstore.StartAsync();
        var buyer = BookstoreRun.RunAsync([.. bookstore.BaseUrls, "--seconds", "20", "--quiet"], TimeSpan.FromMinutes(3), command: "buyer");

        // A store, then BookSeller, then PriceGrabber: SIGKILL, and back on the same port and log a moment later.
        foreach (var service in new[] { "store-1", "bookseller", "pricegrabber" })
        {
            await Task.Delay(TimeSpan.FromSeconds(4), TestContext.Current.CancellationToken);
            await bookstore.KillAsync(service);
            await Task.Delay(TimeSpan.FromMilliseconds(300), TestContext.Current.CancellationToken);
            await bookstore.StartAsync(service);
        }

        var run = await buyer;
        Assert.Equal(0, run.ExitCode);
        Assert.True(run["loops"] >= 5, $"only {run["loops"]} loops");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(run["loops"] * 6, run["store_executions"]);  // 3 reserves and 3 releases per loop
        Assert.Equal(run["loops"] * 4, run["seller_executions"]); // 3 adds and 1 empty per loop
        Assert.True(run["resends"] > 0, "no request was resent: the kills did not reach the buyer");
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Buyer_StoreRestartsWithItsLogDeleted_ReportsMismatches()
    {
        // The checker itself: a store that forgot what it acknowledged (a lost volume) must be noticed.
        await using var bookstore = await ServedBookstore.StartAsync();
        var buyer = BookstoreRun.RunAsync([.. bookstore.BaseUrls, "--seconds", "10", "--quiet"], TimeSpan.FromMinutes(3), command: "buyer");
        await bookstore.WaitForExecutionsAsync("store-1", 6); // the buyer's books went through it: it has something to forget
        await bookstore.KillAsync("store-1");
        bookstore.DeleteLog("store-1");
        await bookstore.StartAsync("store-1");

        var run = await buyer;
        Assert.Equal(3, run.ExitCode);
        Assert.True(run["mismatches"] > 0, "the reconciliation did not notice a store that forgot what it had acknowledged");
        Assert.Contains(run.Output, l => l.StartsWith("MISMATCH store-1", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Buyer_WithoutBookSeller_IsRefusedWithUsage()
    {
        var run = await BookstoreRun.RunAsync(["--base-url", "pricegrabber=http://127.0.0.1:9", "--base-url", "store-0=http://127.0.0.1:9"], TimeSpan.FromMinutes(1), command: "buyer");

        Assert.Equal(2, run.ExitCode);
        Assert.Contains(run.Output, l => l.Contains("--base-url bookseller=URL is required", StringComparison.Ordinal));
    }
}

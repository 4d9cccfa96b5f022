using System.Collections.Frozen;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// TaxCalculator ([Phoenix/App §5.5]): the tax of an amount in a region. Functional when roles are on (stateless and
/// pure: no log, no call id, its callers neither force nor log its replies, replay calls it again); persistent without.
/// </summary>
internal static class TaxCalculatorEndpoints
{
    private static readonly FrozenDictionary<string, decimal> Rates = new Dictionary<string, decimal>(StringComparer.Ordinal)
    {
        ["WA"] = 0.101m,
        ["OR"] = 0m,
        ["CA"] = 0.0725m,
        ["NY"] = 0.08875m,
    }.ToFrozenDictionary(StringComparer.Ordinal);

    public static void Map(WebApplication app, bool useRoles)
    {
        if (useRoles)
        {
            app.MapPost("/tax", [Functional] (TaxRequest request) => Compute(request));
        }
        else
        {
            app.MapPost("/tax", [Persistent] (TaxRequest request) => Compute(request));
        }
    }

    private static IResult Compute(TaxRequest request)
        => Rates.TryGetValue(request.Region, out var rate)
            ? Results.Ok(new TaxResult(request.Region, rate, decimal.Round(request.Amount * rate, 2, MidpointRounding.AwayFromZero)))
            : Results.NotFound();
}

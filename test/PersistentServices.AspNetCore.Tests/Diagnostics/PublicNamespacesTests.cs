namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>
/// An application needs one <c>using PersistentServices;</c> (docs/architecture.md, "Three public namespaces"): the
/// public types of the engine and of the ASP.NET Core package are in <c>PersistentServices</c>, or in the framework's
/// own namespaces for the registration methods; the folders' namespaces hold internal types only.
/// </summary>
public sealed class PublicNamespacesTests
{
    // PersistentServices.Testing: the replay check, for an application's test project (the Testing package's namespace).
    private static readonly string[] Allowed = ["PersistentServices", "PersistentServices.Testing", "Microsoft.Extensions.DependencyInjection", "Microsoft.AspNetCore.Builder"];

    [Theory]
    [InlineData(typeof(PersistentServices.SharedVariable<>))]   // PersistentServices.Core
    [InlineData(typeof(PersistentAttribute))]                   // PersistentServices.AspNetCore
    public void PublicTypes_AreInTheRootNamespace_OrTheFrameworks(Type inAssembly)
    {
        var elsewhere = inAssembly.Assembly.GetExportedTypes()
            .Where(type => !Allowed.Contains(type.Namespace))
            .Select(type => type.FullName)
            .ToList();

        Assert.Empty(elsewhere);
    }
}

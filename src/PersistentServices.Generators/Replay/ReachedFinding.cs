using System.Collections.Immutable;
using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Replay;

/// <summary>A finding reached through calls, with the chain of methods from the called one to the one that holds the use.</summary>
internal sealed class ReachedFinding
{
    public ReachedFinding(ReplayFinding finding, ImmutableArray<IMethodSymbol> chain)
    {
        Finding = finding;
        Chain = chain;
    }

    public ReplayFinding Finding { get; }

    public ImmutableArray<IMethodSymbol> Chain { get; }

    /// <summary>The chain as the message shows it: " via Clock.Now() → Ids.Make()".</summary>
    public string ChainText
    {
        get
        {
            var text = new System.Text.StringBuilder(" via ");
            for (var i = 0; i < Chain.Length; i++)
            {
                if (i > 0)
                {
                    text.Append(" → ");
                }

                text.Append(Operations.Display(Chain[i]));
            }

            return text.ToString();
        }
    }
}
